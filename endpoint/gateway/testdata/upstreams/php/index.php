<?php
// A plain PHP website (php -S 127.0.0.1:PORT index.php) with a lenient
// router like Laravel's: case and a trailing slash ignored, _method (in
// a form or a JSON body) and X-HTTP-Method-Override honoured, the last of
// repeated fields read. The gateway's tests run it behind
// opsgate-gateway and read what it performed from GET /__performed
// (OPSGATE_STATE: the file it keeps them in; OPSGATE_IDENTITY_KEY: the secret).
require __DIR__ . '/opsgate_identity.php';

$key = getenv('OPSGATE_IDENTITY_KEY');
$state = getenv('OPSGATE_STATE');
header('Content-Type: application/json');

$method = $_SERVER['REQUEST_METHOD'];
$json = null;
if (str_contains($_SERVER['CONTENT_TYPE'] ?? '', 'json')) {
    $json = json_decode(file_get_contents('php://input'), true);
}
$input = is_array($json) ? $json : $_POST;
if ($method === 'POST') {
    $over = $_SERVER['HTTP_X_HTTP_METHOD_OVERRIDE'] ?? ($input['_method'] ?? null);
    if (is_string($over) && $over !== '') $method = strtoupper($over);
}
$path = strtolower(rtrim(parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH), '/')) ?: '/';

function record(string $action, array $fields = []): void {
    global $key, $state;
    $who = opsgate_identity($key);
    $row = ['action' => $action] + $fields + [
        'method' => $_SERVER['REQUEST_METHOD'], 'path' => $_SERVER['REQUEST_URI'],
        'account' => $who['account'] ?? null, 'claimed_account' => $_SERVER['HTTP_X_OPSGATE_ACCOUNT'] ?? null,
    ];
    $f = fopen($state, 'a');
    flock($f, LOCK_EX);
    fwrite($f, json_encode($row) . "\n");
    fclose($f);
    echo json_encode(['done' => $action] + $fields);
}
function fail(int $status, string $error): void {
    http_response_code($status);
    echo json_encode(['error' => $error]);
}
$text = fn($v) => is_array($v) ? json_encode($v) : (string) $v;

if ($method === 'POST' && preg_match('#^/orders/([^/]+)/exchange$#', $path, $m)) {
    if (empty($input['size'])) { fail(422, 'size is required'); return; }
    record('exchange', ['order' => $m[1], 'size' => $text($input['size'])]);
} elseif ($method === 'PATCH' && preg_match('#^/api/deliveries/([^/]+)$#', $path, $m)) {
    if (!is_array($json) || empty($json['date'])) { fail(422, 'date is required'); return; }
    record('delivery', ['order' => $m[1], 'date' => $text($json['date'])]);
} elseif ($method === 'DELETE' && preg_match('#^/api/subscriptions/([^/]+)$#', $path, $m)) {
    record('cancel', ['subscription' => $m[1]]);
} elseif ($method === 'POST' && preg_match('#^/api/subscriptions/([^/]+)$#', $path, $m)) {
    record('renew', ['subscription' => $m[1]]);
} elseif ($method === 'POST' && $path === '/cart/items') {
    record('cart');
} elseif ($method === 'POST' && $path === '/newsletter') {
    record('newsletter');
} elseif ($method === 'GET' && $path === '/whoami') {
    echo json_encode(['identity' => opsgate_identity($key), 'claimed_account' => $_SERVER['HTTP_X_OPSGATE_ACCOUNT'] ?? null]);
} elseif ($method === 'GET' && $path === '/__performed') {
    $rows = is_file($state) ? array_filter(explode("\n", file_get_contents($state))) : [];
    echo '[' . implode(',', $rows) . ']';
} else {
    fail(404, 'not found');
}
