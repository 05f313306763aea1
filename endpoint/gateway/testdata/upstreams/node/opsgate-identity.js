// The identity opsgate-gateway signed, for Node.js (Express, Hono, plain
// http): {agent, user, account} when the headers carry a valid signature
// made within 5 minutes, else null. key is the text of the variable the
// gateway's identity_key_env names.
const crypto = require("node:crypto");

function opsgateIdentity(req, key) {
  const h = (name) => String(req.headers["x-opsgate-" + name] || "");
  const ts = h("timestamp");
  if (!/^\d+$/.test(ts) || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return null;
  const method = req.originalMethod || req.method; // as sent, before any method override
  const path = (req.originalUrl || req.url).split("?")[0];
  const signed = ["v1", ts, method, path, h("agent"), h("user"), h("account")].join("\n");
  const want = Buffer.from("v1=" + crypto.createHmac("sha256", key).update(signed).digest("hex"));
  const got = Buffer.from(h("signature"));
  if (got.length !== want.length || !crypto.timingSafeEqual(got, want)) return null;
  if (!h("agent")) return null; // signed, but for no agent's Session
  return { agent: h("agent"), user: h("user"), account: h("account") || null };
}

module.exports = { opsgateIdentity };
