<?php
// The identity opsgate-gateway signed, for PHP (Laravel, Symfony, plain
// PHP): ['agent', 'user', 'account'] when the headers carry a valid
// signature made within 5 minutes, else null. $key is the text of the
// variable the gateway's identity_key_env names.
function opsgate_identity(string $key): ?array {
    $h = fn(string $name): string => $_SERVER['HTTP_X_OPSGATE_' . $name] ?? '';
    $ts = $h('TIMESTAMP');
    if (!ctype_digit($ts) || abs(time() - (int) $ts) > 300) return null;
    $path = explode('?', $_SERVER['REQUEST_URI'], 2)[0];
    $signed = implode("\n", ['v1', $ts, $_SERVER['REQUEST_METHOD'], $path, $h('AGENT'), $h('USER'), $h('ACCOUNT')]);
    $want = 'v1=' . hash_hmac('sha256', $signed, $key);
    if (!hash_equals($want, $h('SIGNATURE')) || $h('AGENT') === '') return null;
    return ['agent' => $h('AGENT'), 'user' => $h('USER'), 'account' => $h('ACCOUNT') ?: null];
}
