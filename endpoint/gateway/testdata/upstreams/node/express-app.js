// An Express 4 website with its default routing (case-insensitive, a
// trailing slash ignored), body parsers and method-override: the
// gateway's tests run it behind opsgate-gateway and read what it
// performed from GET /__performed.
//
//   node express-app.js   (prints its port; OPSGATE_IDENTITY_KEY: the secret)
const express = require("express");
const methodOverride = require("method-override");
const { opsgateIdentity } = require("./opsgate-identity.js");

const key = process.env.OPSGATE_IDENTITY_KEY;
const performed = [];
const app = express();
app.use(express.urlencoded({ extended: true }));
app.use(express.json());
app.use(methodOverride("X-HTTP-Method-Override"));
app.use(methodOverride((req) => (req.body && typeof req.body === "object" && "_method" in req.body ? req.body._method : undefined)));

function record(req, res, action, fields) {
  const who = opsgateIdentity(req, key);
  performed.push({
    action, ...fields, method: req.method, path: req.originalUrl,
    account: who ? who.account : null, claimed_account: req.get("X-Opsgate-Account") || null,
  });
  res.json({ done: action, ...fields });
}
const text = (v) => (v === undefined || v === null ? "" : String(v));

app.post("/orders/:order/exchange", (req, res) => {
  const size = req.body && req.body.size;
  if (!size) return res.status(422).json({ error: "size is required" });
  record(req, res, "exchange", { order: req.params.order, size: text(size) });
});
app.patch("/api/deliveries/:order", (req, res) => {
  const date = req.body && req.body.date;
  if (!date) return res.status(422).json({ error: "date is required" });
  record(req, res, "delivery", { order: req.params.order, date: text(date) });
});
app.delete("/api/subscriptions/:id", (req, res) => record(req, res, "cancel", { subscription: req.params.id }));
app.post("/api/subscriptions/:id", (req, res) => record(req, res, "renew", { subscription: req.params.id }));
app.post("/cart/items", (req, res) => record(req, res, "cart", {}));
app.post("/newsletter", (req, res) => record(req, res, "newsletter", {}));
app.get("/whoami", (req, res) => res.json({ identity: opsgateIdentity(req, key), claimed_account: req.get("X-Opsgate-Account") || null }));
app.get("/__performed", (req, res) => res.json(performed));

const server = app.listen(Number(process.argv[2] || 0), "127.0.0.1", () => console.log(server.address().port));
