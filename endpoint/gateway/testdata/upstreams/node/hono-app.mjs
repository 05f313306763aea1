// A Hono 4 website on @hono/node-server with its default routing (strict:
// case and trailing slash count) and the methodOverride middleware (a
// form's _method): the gateway's tests run it behind opsgate-gateway and
// read what it performed from GET /__performed.
//
//   node hono-app.mjs   (prints its port; OPSGATE_IDENTITY_KEY: the secret)
import { createRequire } from "node:module";
import { Hono } from "hono";
import { methodOverride } from "hono/method-override";
import { serve } from "@hono/node-server";

const { opsgateIdentity } = createRequire(import.meta.url)("./opsgate-identity.js");
const key = process.env.OPSGATE_IDENTITY_KEY;
const performed = [];
const app = new Hono();
app.use("*", methodOverride({ app }));

// The request as the snippet reads it: the one Node received, before
// methodOverride made another.
const incoming = (c) => c.env.incoming;
function record(c, action, fields) {
  const who = opsgateIdentity(incoming(c), key);
  performed.push({
    action, ...fields, method: c.req.method, path: incoming(c).url,
    account: who ? who.account : null, claimed_account: c.req.header("X-Opsgate-Account") || null,
  });
  return c.json({ done: action, ...fields });
}
const text = (v) => (v === undefined || v === null ? "" : String(v));

app.post("/orders/:order/exchange", async (c) => {
  const body = await c.req.parseBody();
  if (!body.size) return c.json({ error: "size is required" }, 422);
  return record(c, "exchange", { order: c.req.param("order"), size: text(body.size) });
});
app.patch("/api/deliveries/:order", async (c) => {
  let body = {};
  try { body = await c.req.json(); } catch { return c.json({ error: "not JSON" }, 400); }
  if (!body.date) return c.json({ error: "date is required" }, 422);
  return record(c, "delivery", { order: c.req.param("order"), date: text(body.date) });
});
app.delete("/api/subscriptions/:id", (c) => record(c, "cancel", { subscription: c.req.param("id") }));
app.post("/api/subscriptions/:id", (c) => record(c, "renew", { subscription: c.req.param("id") }));
app.post("/cart/items", (c) => record(c, "cart", {}));
app.post("/newsletter", (c) => record(c, "newsletter", {}));
app.get("/whoami", (c) => c.json({ identity: opsgateIdentity(incoming(c), key), claimed_account: c.req.header("X-Opsgate-Account") || null }));
app.get("/__performed", (c) => c.json(performed));

serve({ fetch: app.fetch, port: Number(process.argv[2] || 0), hostname: "127.0.0.1" }, (info) => console.log(info.port));
