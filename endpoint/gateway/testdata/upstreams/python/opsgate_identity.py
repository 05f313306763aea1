# The identity opsgate-gateway signed, for Python (any WSGI app: Flask,
# Django, ...): {"agent", "user", "account"} when the headers carry a valid
# signature made within 5 minutes, else None. key is the text of the
# variable the gateway's identity_key_env names.
import hashlib, hmac, time

def opsgate_identity(environ, key):
    h = lambda name: environ.get("HTTP_X_OPSGATE_" + name, "")
    ts = h("TIMESTAMP")
    if not (ts.isascii() and ts.isdigit()) or abs(time.time() - int(ts)) > 300:
        return None
    method = environ["REQUEST_METHOD"]  # as sent, before any method override
    # The path as sent: RAW_URI or REQUEST_URI (gunicorn, Werkzeug), else PATH_INFO.
    path = (environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")).split("?")[0]
    signed = "\n".join(["v1", ts, method, path, h("AGENT"), h("USER"), h("ACCOUNT")])
    want = "v1=" + hmac.new(key.encode(), signed.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, h("SIGNATURE")) or not h("AGENT"):
        return None
    return {"agent": h("AGENT"), "user": h("USER"), "account": h("ACCOUNT") or None}
