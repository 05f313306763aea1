// @ts-check
// A small Personal Agent for the Poppy `operations` extension v3 on a
// website, in Node (JavaScript checked as TypeScript: `npx tsc -p .` if you
// have it; nothing to build). It is the agent's side written down in
// ../../PROTOCOL.md, run against the opsgate demo shop:
//
//   npm install
//   node agent.mjs --shop http://localhost:8080            # the demo: go run ./demo
//
// It serves its Client ID Metadata Document and JWKS, joins a Chromium to
// a Session (a join assertion), exchanges the jacket on the demo's order
// page, takes the ref from the browser's own response (Poppy-Operation),
// looks the operation up with a Session JWT, checks the terms against what
// the browser asked for, approves them as the agent under the instruction
// "any exchange up to --max USD", has the browser press Continue, and
// waits until the endpoint says performed. Exit 0 performed, 2 not
// approved, 1 an error.

import { createServer } from "node:http";
import { randomBytes, createHash } from "node:crypto";
import { parseArgs } from "node:util";
import * as jose from "jose";
import puppeteer from "puppeteer-core";

const { values: flags } = parseArgs({
  options: {
    shop: { type: "string", default: "http://localhost:8080" },
    "agent-url": { type: "string" }, // a public HTTPS URL in front of this agent's server; default http://127.0.0.1:<port>
    chromium: { type: "string", default: "/usr/bin/chromium" },
    user: { type: "string" },
    max: { type: "string", default: "100" }, // the instruction: approve an exchange whose price difference is at most this, in USD
    sku: { type: "string" }, // the replacement; default the first of stormline-insulated-m, stormline-m the page offers
  },
});
const shop = new URL(flags.shop ?? "").origin;
const user = flags.user ?? "usr_node_" + randomBytes(6).toString("hex");
const extensions = '"operations";v="3"'; // Poppy-Extensions, and the join's extensions claim (A01, A02)

/** @param {string} format @param {...unknown} args */
function step(format, ...args) {
  let i = 0;
  console.log("agent: " + format.replace(/%s/g, () => String(args[i++])));
}

/** The ref printed in full once, then by its start. @param {string} ref */
const short = (ref) => (ref.length > 32 ? ref.slice(0, 24) + "… (" + ref.length + " characters)" : ref);

// --- The agent's keys: a long-term key in its JWKS, and a delegated key --

const alg = "ES256";
const longTerm = await jose.generateKeyPair(alg, { extractable: true });
const longTermJWK = await jose.exportJWK(longTerm.publicKey);
const kid = await jose.calculateJwkThumbprint(longTermJWK); // stays the same for the same key
const delegated = await jose.generateKeyPair(alg, { extractable: true });
const delegatedJWK = await jose.exportJWK(delegated.publicKey);

// --- The agent's server: its metadata document, its JWKS, its join page --

/** @type {Map<string, string>} one-time join pages by handle */
const joinPages = new Map();
const server = createServer((req, res) => {
  const path = new URL(req.url ?? "/", "http://x").pathname;
  if (path === "/agent.json") {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify({ client_id: clientID, client_name: "opsgate Node example agent", jwks_uri: base + "/jwks.json" }));
  } else if (path === "/jwks.json") {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify({ keys: [{ ...longTermJWK, kid, alg, use: "sig" }] }));
  } else if (path.startsWith("/join/") && joinPages.has(path)) {
    const page = joinPages.get(path);
    joinPages.delete(path); // single use: the page holds the assertion, never a URL
    res.setHeader("Content-Type", "text/html; charset=utf-8");
    res.setHeader("Cache-Control", "no-store");
    res.setHeader("Referrer-Policy", "no-referrer");
    res.end(page);
  } else {
    res.statusCode = 404;
    res.end("not found");
  }
});
await new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(undefined)));
const address = server.address();
const local = "http://127.0.0.1:" + (typeof address === "object" && address ? address.port : 0);
const base = (flags["agent-url"] ?? local).replace(/\/$/, "");
const clientID = base + "/agent.json";
step("I am %s (User %s)", clientID, user);

// The delegation (poppy-dlg+jwt): the long-term key vouches for the
// delegated key, cnf.jwk, for at most 24 h.
const delegation = await new jose.SignJWT({ cnf: { jwk: delegatedJWK } })
  .setProtectedHeader({ alg, typ: "poppy-dlg+jwt", kid })
  .setIssuer(clientID)
  .setIssuedAt()
  .setExpirationTime("1h")
  .sign(longTerm.privateKey);

/**
 * A token signed with the delegated key: a Session JWT (a new one for
 * every request) or a browser join assertion.
 * @param {string} typ @param {string} aud @param {string} sid
 * @param {Record<string, unknown>} [more] @param {string} [lifetime]
 */
function agentJWT(typ, aud, sid, more = {}, lifetime = "60s") {
  return new jose.SignJWT({ sid, ...more })
    .setProtectedHeader({ alg, typ, poppy_dlg: delegation })
    .setIssuer(clientID)
    .setSubject(user)
    .setAudience(aud)
    .setIssuedAt()
    .setExpirationTime(lifetime)
    .setJti(randomBytes(16).toString("base64url"))
    .sign(delegated.privateKey);
}

// --- Discovery (§2) -----------------------------------------------------

const doc = await (await fetch(shop + "/.well-known/poppy.json")).json();
const ops = (doc.extensions?.operations ?? []).find((/** @type {any} */ e) => String(e.version).split(".")[0] === "3");
if (!ops?.endpoint || !doc.web?.browser_session_endpoint) {
  step("%s does not list operations v3: nothing to do (A03)", shop);
  process.exit(1);
}
const endpoint = ops.endpoint;
const joinURL = doc.web.browser_session_endpoint;
if (new URL(joinURL).origin !== shop) {
  step("WARNING: the shop names its join on %s, and I was given %s: use --shop %s", new URL(joinURL).origin, shop, new URL(joinURL).origin);
}
step("%s: endpoint %s, join %s", doc.name ?? shop, endpoint, joinURL);

// --- The browser, joined to a Session ------------------------------------

const sid = "ses_" + randomBytes(12).toString("base64url").replace(/[-_]/g, "x");
const browser = await puppeteer.launch({
  executablePath: flags.chromium,
  headless: true,
  args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
});
let exitCode = 1;
try {
  const page = await browser.newPage();
  /** @type {{ref: string, method: string, url: string, body: string}[]} */
  const refs = [];
  page.on("response", (res) => {
    const header = res.headers()["poppy-operation"];
    if (!header) return;
    // A11: only a response from the shop's own origin; A10: only a sid
    // this agent joined its browser to; A08: only from the header.
    if (new URL(res.url()).origin !== shop) return step("ignored a Poppy-Operation from %s (A11)", res.url());
    const dict = Object.fromEntries([...header.matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    if (dict.sid !== sid) return step("ignored a Poppy-Operation naming sid %s (A10)", dict.sid);
    const req = res.request();
    refs.push({ ref: dict.ref, method: req.method(), url: req.url(), body: req.postData() ?? "" });
    step("%s %s got 403 with Poppy-Operation: ref %s (A08)", req.method(), req.url(), dict.ref);
  });

  const assertion = await agentJWT("poppy-browser+jwt", joinURL, sid, { return_to: shop + "/", extensions }, "30s");
  const handle = "/join/" + randomBytes(12).toString("hex");
  joinPages.set(handle, `<!doctype html><meta charset="utf-8"><title>Joining</title>
<form id="join" method="post" action="${joinURL}"><input type="hidden" name="assertion" value="${assertion}"><button>Join</button></form>`);
  await page.goto(local + handle);
  const [joined] = await Promise.all([page.waitForNavigation(), page.click("#join button")]);
  if (!joined || !joined.ok() || new URL(page.url()).origin !== shop) {
    step("the join was refused: %s %s", joined?.status(), (await page.evaluate(() => document.body.innerText)).slice(0, 600));
    throw new Error("join refused");
  }
  step("browser joined to Session %s", sid);

  // --- The action: the browser exchanges the jacket -----------------------

  await page.goto(shop + "/orders/ord_7Hk2");
  const offered = await page.$$eval("#replacement-itm_4Qa option", (os) => os.map((o) => /** @type {HTMLOptionElement} */ (o).value));
  const sku = flags.sku ?? ["stormline-insulated-m", "stormline-m"].find((s) => offered.includes(s)) ?? offered[0];
  await page.select("#replacement-itm_4Qa", sku);
  await Promise.all([page.waitForNavigation(), page.click('form[action="/orders/ord_7Hk2/items/itm_4Qa/exchange"] button')]);
  const taken = refs.at(-1);
  if (!taken) throw new Error("the exchange got no Poppy-Operation for my Session");
  step("not done yet: it waits for approval (A16)");

  // --- The endpoint: look up, check, approve (§4, §5, §6) ---------------

  /** @param {string} ref @param {string} [approval] */
  async function post(ref, approval) {
    /** @type {Record<string, string>} */
    const headers = {
      "Content-Type": "application/json",
      "Poppy-Session": await agentJWT("poppy-session+jwt", shop, sid), // a new one for every request
      "Poppy-Version": "1.0",
      "Poppy-Extensions": extensions,
    };
    if (approval) headers["Poppy-Approval"] = approval;
    step("→ POST %s {\"ref\": %s}%s", endpoint, short(ref), approval ? " with Poppy-Approval: " + approval : "");
    const res = await fetch(endpoint, { method: "POST", headers, body: JSON.stringify({ ref }) });
    const body = res.status === 204 ? {} : await res.json();
    step("← %s %s%s", res.status, body.error ?? body.status ?? "", body.error_description ? ": " + body.error_description : "");
    return { status: res.status, body };
  }

  const look = await post(taken.ref);
  const op = look.body.operation;
  if (look.status !== 403 || !op) throw new Error("the lookup returned no operation");
  const terms = op.terms ?? {};
  step("operation %s, revision %s: %s", op.operation_id, op.revision, JSON.stringify(op.summary ?? ""));
  // A27: the terms are for the action the browser just took.
  const asked = new URLSearchParams(taken.body).get("replacement_sku");
  const amount = Number(terms.price_difference?.amount ?? NaN);
  if (terms.replacement_sku !== asked || terms.order_id !== "ord_7Hk2" || terms.item_id !== "itm_4Qa") {
    step("the terms are not what my browser asked for (%s vs %s): I ask the user instead; not approved (A27)", terms.replacement_sku, asked);
    exitCode = 2;
  } else if (!(terms.price_difference?.currency === "USD" && amount <= Number(flags.max))) {
    step("the instruction covers exchanges up to %s USD; this one is %s: not approved (A24)", flags.max, terms.price_difference?.amount);
    exitCode = 2;
  } else if (/[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/.test(op.summary ?? "")) {
    step("the summary hides characters: not approved by me (A07)");
    exitCode = 2;
  } else {
    // An agent approval: approver "agent", no input_type (A33, A35); a
    // reference of our own, never sent to two Companies (A36, A37).
    const reference = "apr_" + createHash("sha256").update(randomBytes(16)).digest("base64url").slice(0, 22).replace(/[-_]/g, "x");
    const approval = `operation_id="${op.operation_id}", revision="${op.revision}", approver="agent", approved_at=${Math.floor(Date.now() / 1000)}, reference="${reference}"`;
    const ans = await post(taken.ref, approval);
    if (ans.status !== 204) throw new Error("the approval was not recorded: " + (ans.body.error ?? ans.status));

    // A41: the browser makes the request again: the waiting page's Continue.
    await Promise.all([page.waitForNavigation(), page.click("#opsgate-continue button")]);
    for (let i = 0; i < 40; i++) {
      const st = await post(taken.ref);
      if (st.body.status === "performed") {
        step("PERFORMED, once (§7)");
        exitCode = 0;
        break;
      }
      await new Promise((ok) => setTimeout(ok, 500));
    }
    if (exitCode !== 0) throw new Error("not performed in time");
  }
} catch (e) {
  step("error: %s", e instanceof Error ? e.message : e);
} finally {
  await browser.close();
  server.close();
}
process.exit(exitCode);
