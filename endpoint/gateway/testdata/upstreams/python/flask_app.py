# A Flask website with its default routing (Werkzeug: case and trailing
# slash count) and form and JSON parsing: the gateway's tests run it behind
# opsgate-gateway and read what it performed from GET /__performed.
#
#   /usr/bin/python3 flask_app.py   (prints its port; OPSGATE_IDENTITY_KEY: the secret)
import logging, os, sys, threading
from flask import Flask, jsonify, request
from werkzeug.serving import make_server
from opsgate_identity import opsgate_identity

key = os.environ["OPSGATE_IDENTITY_KEY"]
performed, lock = [], threading.Lock()
app = Flask(__name__)

def record(action, **fields):
    who = opsgate_identity(request.environ, key)
    with lock:
        performed.append(dict(action=action, **fields, method=request.method, path=request.full_path.rstrip("?"),
                              account=who["account"] if who else None,
                              claimed_account=request.environ.get("HTTP_X_OPSGATE_ACCOUNT")))
    return jsonify(done=action, **fields)

@app.post("/orders/<order>/exchange")
def exchange(order):
    size = request.form.get("size")
    if not size:
        return jsonify(error="size is required"), 422
    return record("exchange", order=order, size=size)

@app.patch("/api/deliveries/<order>")
def delivery(order):
    body = request.get_json(silent=True) or {}
    if not isinstance(body, dict) or not body.get("date"):
        return jsonify(error="date is required"), 422
    return record("delivery", order=order, date=str(body["date"]))

@app.delete("/api/subscriptions/<sub>")
def cancel(sub):
    return record("cancel", subscription=sub)

@app.post("/api/subscriptions/<sub>")
def renew(sub):
    return record("renew", subscription=sub)

@app.post("/cart/items")
def cart():
    return record("cart")

@app.post("/newsletter")
def newsletter():
    return record("newsletter")

@app.get("/whoami")
def whoami():
    return jsonify(identity=opsgate_identity(request.environ, key), claimed_account=request.environ.get("HTTP_X_OPSGATE_ACCOUNT"))

@app.get("/__performed")
def list_performed():
    with lock:
        return jsonify(performed)

logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = make_server("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0, app, threaded=True)
print(server.server_port, flush=True)
server.serve_forever()
