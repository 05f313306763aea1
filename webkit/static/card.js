// opsgate card.js: the waiting card on htmx and Turbo pages (§4
// "Websites", §6 W62, W93). Served as a file by the kit, so a
// Content-Security-Policy of script-src 'self' holds. Load it once in the
// site's layout, after htmx or Turbo:
//
//   <script src="/_opsgate/card.js" defer></script>
//
// A gated request that htmx or Turbo sends gets 403 with the waiting card
// (a fragment of the page; for Turbo in a Turbo Stream) instead of the
// handler's answer. This script:
//
//   - makes htmx 2 swap it, or a site's own fragment holding it (any 403
//     with Poppy-Operation and HTML; htmx 2 swaps no 4xx by itself, htmx 4
//     does):
//     where htmx would have swapped the answer, in the element or under
//     the selector the element (or an ancestor) names in
//     data-opsgate-target, or over the page when the request's swap
//     shows nothing (none, delete) or would replace the whole body;
//   - links the kit's stylesheet (htmx drops a fragment's <head>);
//   - remembers each htmx request (its element, target, swap, method,
//     URL, values and headers), asks the card's status route every few
//     seconds, and once the approval is recorded (or Continue is
//     pressed) makes the original request again, once, the framework's
//     way: htmx.ajax from the original element (or the card, when the
//     element has left the page) to the original target, with the same
//     values and headers, so that a CSRF token the page sends in a header
//     (hx-headers) rides along; Turbo submits the card's Continue form
//     itself, adding its own headers (X-CSRF-Token from the csrf-token
//     meta);
//   - says on the card what happens ("Approved. Continuing…"), and takes
//     the card away once the repeated request was answered.
//
// Nothing here reads or shows the operation: the card never carries it
// (W64), and the status route answers only its status.
(function () {
  "use strict";
  if (window.opsgateCard) return; // loaded twice
  window.opsgateCard = true;
  var script = document.currentScript;
  var base = script && script.src ? new URL(".", script.src).pathname : "/_opsgate/";
  var CARD = ".opsgate-card[data-opsgate-via]";
  var STATUS = "X-Opsgate-Status", OPERATION = "Poppy-Operation";
  var answered = []; // requests answered with a card, until their card is found
  var current = null; // the htmx repeat being sent, until htmx configures it

  function on(name, fn, capture) { document.addEventListener(name, fn, !!capture); }

  // A kit card in an error answer: the waiting card (Poppy-Operation and
  // HTML: the kit's, or a site's own Kit.Refused with the card in its own
  // fragment) or a notice ("try again shortly"), a
  // <section class="opsgate-card">.
  function kitCard(status, text, operation, type) {
    if (status < 400 || typeof text !== "string") return false;
    return /^\s*<section class="opsgate-card/.test(text) || (status === 403 && !!operation && /html/i.test(type || ""));
  }

  function remember(rec) {
    answered.push(rec);
    if (answered.length > 20) answered.shift(); // cards the page never showed
  }

  function entries(body) {
    var out = [];
    if (body && typeof body.forEach === "function") body.forEach(function (v, k) { out.push([k, v]); });
    return out;
  }

  function formData(list) {
    var fd = new FormData();
    list.forEach(function (e) { fd.append(e[0], e[1]); });
    return fd;
  }

  // Headers htmx makes again itself are not replayed: its own HX-*,
  // Accept and Content-Type.
  function ownHeaders(h) {
    var out = {};
    if (!h) return out;
    Object.keys(h).forEach(function (k) {
      if (!/^(hx-|accept$|content-type$)/i.test(k) && h[k] != null) out[k] = String(h[k]);
    });
    return out;
  }

  function closestAttr(elt, name) {
    var e = elt && elt.closest ? elt.closest("[" + name + "],[data-" + name + "]") : null;
    return e ? (e.getAttribute(name) || e.getAttribute("data-" + name)) : null;
  }

  // Where the card goes instead of the request's own target and swap, or
  // null for there: the site's data-opsgate-target, else over the page
  // when the swap would show nothing or replace the whole body.
  function placement(elt, target, swap) {
    var named = elt && elt.closest ? elt.closest("[data-opsgate-target]") : null;
    if (!named) named = document.body && document.body.hasAttribute("data-opsgate-target") ? document.body : null;
    if (named) {
      var t = document.querySelector(named.getAttribute("data-opsgate-target"));
      if (t) return { target: t, swap: "innerHTML", overlay: false };
    }
    var style = String(swap || "").trim().split(/\s+/)[0];
    if (!target || !target.isConnected || target === document.body || target === document.documentElement ||
        /^(none|delete|textContent)$/i.test(style)) {
      return { target: document.body, swap: "beforeend", overlay: true };
    }
    return null;
  }

  // --- htmx 2 (events htmx:beforeRequest, htmx:beforeSwap; XHR) ---

  var byXHR = new WeakMap();
  on("htmx:beforeRequest", function (e) {
    var d = e.detail, c = d && d.requestConfig;
    if (!c || !d.xhr) return;
    var rec = {
      htmx: 2, source: d.elt, target: d.target, verb: c.verb, path: c.path,
      swap: (d.etc && d.etc.swapOverride) || closestAttr(d.elt, "hx-swap") || (window.htmx && htmx.config.defaultSwapStyle) || "innerHTML",
      body: entries(c.formData), headers: ownHeaders(c.headers),
    };
    byXHR.set(d.xhr, rec);
    if (current && current.source === d.elt) { current.xhr = d.xhr; }
  });
  on("htmx:confirm", function (e) {
    // htmx 2 fires it for every request; hx-confirm's question is not
    // asked again for a repeat: the person approved it in the agent.
    var d = e.detail;
    if (!current || !d || d.elt !== current.source || !d.question || !d.issueRequest || d.ctx) return;
    e.preventDefault();
    current.inner = d.issueRequest(true);
  });
  on("htmx:configRequest", function (e) {
    if (!current || current.rec.htmx !== 2 || e.detail.elt !== current.source || current.configured) return;
    current.configured = true;
    e.detail.path = current.rec.path;
    e.detail.verb = current.rec.verb;
    e.detail.parameters = formData(current.rec.body); // exactly the values it sent
  });
  on("htmx:beforeSwap", function (e) {
    var d = e.detail, xhr = d && d.xhr;
    if (!xhr || !kitCard(xhr.status, xhr.responseText, xhr.getResponseHeader(OPERATION), xhr.getResponseHeader("Content-Type"))) return;
    d.shouldSwap = true;
    d.isError = false;
    var rec = byXHR.get(xhr) || {};
    rec.status = xhr.getResponseHeader(STATUS) || "";
    if (xhr.getResponseHeader(OPERATION)) remember(rec);
    var p = placement(rec.source || d.elt, d.target, d.swapOverride || rec.swap);
    if (p) { d.target = p.target; d.swapOverride = p.swap; rec.overlay = p.overlay; }
  });

  // --- htmx 4 (events htmx:before:request, htmx:after:request; fetch) ---

  on("htmx:before:request", function (e) {
    var ctx = e.detail && e.detail.ctx;
    if (!ctx || !ctx.request) return;
    ctx.opsgateRecord = {
      htmx: 4, source: ctx.sourceElement, target: ctx.target, swap: ctx.swap, select: ctx.select,
      verb: ctx.request.method, path: ctx.request.action, body: entries(ctx.request.body),
      headers: ownHeaders(ctx.request.headers),
    };
  });
  on("htmx:config:request", function (e) {
    var ctx = e.detail && e.detail.ctx;
    if (!ctx || !ctx.opsgateRepeat) return;
    var rec = ctx.opsgateRepeat.rec;
    ctx.opsgateRepeat.ctx = ctx;
    // Exactly the values it sent: a GET's and DELETE's are in its URL.
    ctx.request.body = /^(GET|DELETE)$/i.test(rec.verb) ? new FormData() : formData(rec.body);
  });
  on("htmx:confirm", function (e) {
    var ctx = e.detail && e.detail.ctx;
    if (ctx && ctx.opsgateRepeat && e.detail.issueRequest) { e.preventDefault(); e.detail.issueRequest(); }
  });
  on("htmx:after:request", function (e) {
    var ctx = e.detail && e.detail.ctx;
    if (!ctx || !ctx.response || !kitCard(ctx.response.status, ctx.text, ctx.response.headers.get(OPERATION), ctx.response.headers.get("Content-Type"))) return;
    var rec = ctx.opsgateRecord || {};
    rec.status = ctx.response.headers.get(STATUS) || "";
    if (ctx.response.headers.get(OPERATION)) remember(rec);
    var p = placement(ctx.sourceElement, ctx.target, ctx.swap);
    if (p) { ctx.target = p.target; ctx.swap = p.swap; rec.overlay = p.overlay; }
  });

  // --- Turbo (turbo:before-fetch-response; Turbo Streams) ---

  on("turbo:before-fetch-response", function (e) {
    var fr = e.detail && e.detail.fetchResponse, res = fr && fr.response;
    if (!res || res.status !== 403 || !res.headers.get(OPERATION)) return;
    // The stream puts the card in the request's frame, or over the page:
    // Turbo submits the card's own Continue form.
    remember({ turbo: true, status: res.headers.get(STATUS) || "" });
  });

  // --- The cards ---

  function style() {
    if (document.querySelector('link[rel="stylesheet"][href$="opsgate.css"]')) return;
    var link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = base + "opsgate.css";
    document.head.appendChild(link);
  }

  function scan() {
    var cards = document.querySelectorAll(CARD);
    for (var i = 0; i < cards.length; i++) {
      if (!cards[i].opsgate) bind(cards[i]);
    }
  }

  function bind(card) {
    style();
    var url = card.getAttribute("data-opsgate-status") || "";
    var rec = null;
    for (var i = 0; i < answered.length; i++) {
      if (answered[i].status === url) { rec = answered.splice(i, 1)[0]; break; }
    }
    var c = card.opsgate = { rec: rec && rec.verb ? rec : null, done: false, timer: 0, delay: 2000, deadline: Date.now() + 30 * 60 * 1000 };
    if (rec && rec.overlay && !card.closest(".opsgate-overlay")) {
      var wrap = document.createElement("div");
      wrap.className = "opsgate-overlay";
      card.parentNode.insertBefore(wrap, card);
      wrap.appendChild(card);
    }
    card.setAttribute("data-opsgate-live", "");
    if (url && window.fetch && control(card)) c.timer = window.setTimeout(function () { poll(card); }, c.delay);
  }

  function control(card) { return card.querySelector("[data-opsgate-continue]"); }

  function say(card, text) {
    var s = card.querySelector(".opsgate-state");
    if (s) s.textContent = text;
  }

  function later(card) {
    var c = card.opsgate;
    if (c.done || Date.now() > c.deadline || !card.isConnected) return;
    c.delay = Math.min(10000, Math.round(c.delay * 1.25));
    c.timer = window.setTimeout(function () { poll(card); }, c.delay);
  }

  function poll(card) {
    var c = card.opsgate;
    if (c.done || !card.isConnected) return;
    fetch(card.getAttribute("data-opsgate-status"), { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (res) {
        if (res.status === 200) return res.json();
        if (res.status !== 503) { c.done = true; } // unknown or expired: leave it to Continue
        return null;
      })
      .then(function (body) {
        if (c.done) return;
        var status = body && body.status;
        if (status === "approved") return repeat(card);
        if (status === "performing") say(card, "This action is being done\u2026");
        if (status === "performed") { c.done = true; card.setAttribute("data-opsgate-done", ""); say(card, "This action has been done."); return; }
        later(card);
      }, function () { later(card); });
  }

  // repeat makes the original request again, once per card.
  function repeat(card) {
    var c = card.opsgate;
    if (!c || c.repeating) return;
    c.repeating = c.done = true;
    window.clearTimeout(c.timer);
    card.setAttribute("data-opsgate-done", "");
    say(card, "Approved. Continuing\u2026");
    var ctl = control(card);
    if (c.rec && window.htmx) return repeatHtmx(card, c.rec);
    if (ctl instanceof HTMLFormElement) {
      c.submitting = true; // our own submit goes through to htmx or Turbo
      try { ctl.requestSubmit(); } finally { c.submitting = false; }
    } else if (ctl instanceof HTMLAnchorElement) {
      ctl.click();
    }
  }

  function repeatHtmx(card, rec) {
    var source = rec.source && rec.source.isConnected ? rec.source : card;
    // The answer goes where the original one would have gone; when the
    // card took the target's place (an outerHTML swap), it replaces the
    // card.
    var target = rec.target && rec.target.isConnected ? rec.target : card;
    var swap = target === card ? "outerHTML" : rec.swap;
    var opts = { source: source, target: target, swap: swap, headers: rec.headers };
    if (rec.select) opts.select = rec.select;
    var r = { rec: rec, source: source };
    var done;
    if (rec.htmx === 4) {
      opts.opsgateRepeat = r;
      done = htmx.ajax(rec.verb, rec.path, opts);
    } else {
      current = r;
      try { done = htmx.ajax(rec.verb, rec.path, opts); } finally { current = null; }
      if (r.inner) done = r.inner;
    }
    Promise.resolve(done).then(function () { settle(card, r); }, function () { settle(card, r); });
  }

  // settle: once the repeated request was answered, the card goes unless
  // the answer was no success and no new card (the person can press
  // Continue again).
  function settle(card, r) {
    if (!card.isConnected) return;
    var status = r.xhr ? r.xhr.status : r.ctx && r.ctx.response ? r.ctx.response.status : 0;
    if ((status >= 200 && status < 400) || status === 403 && newCard(card)) {
      remove(card);
      return;
    }
    card.opsgate.repeating = false;
    say(card, status ? "Not done: the site answered " + status + ". Press Continue to try again." : "Not done. Press Continue to try again.");
  }

  function newCard(card) {
    var all = document.querySelectorAll(CARD);
    return all.length > 1 || (all.length === 1 && all[0] !== card);
  }

  function remove(card) {
    var wrap = card.parentElement && card.parentElement.classList.contains("opsgate-overlay") ? card.parentElement : card;
    wrap.remove();
  }

  // Continue pressed (by the person or the agent): the card's own form
  // goes through when no htmx request is remembered (htmx or Turbo sends
  // it, with the page's headers); otherwise the original request is made
  // again from its element. Never twice.
  on("submit", function (e) {
    var form = e.target, card = form && form.closest ? form.closest(CARD) : null;
    if (!card || !form.hasAttribute("data-opsgate-continue")) return;
    if (!card.opsgate) bind(card);
    var c = card.opsgate;
    if (c.submitting) return;
    if (c.repeating || (c.rec && window.htmx)) {
      e.preventDefault();
      e.stopImmediatePropagation();
      if (!c.repeating) repeat(card);
      return;
    }
    c.repeating = c.done = true;
    window.clearTimeout(c.timer);
    card.setAttribute("data-opsgate-done", "");
    say(card, "Continuing\u2026");
  }, true);
  on("click", function (e) {
    var a = e.target && e.target.closest ? e.target.closest("a[data-opsgate-continue]") : null;
    var card = a && a.closest(CARD);
    if (!card) return;
    if (!card.opsgate) bind(card);
    if (card.opsgate.linkClicked) { e.preventDefault(); e.stopImmediatePropagation(); return; }
    card.opsgate.linkClicked = card.opsgate.repeating = card.opsgate.done = true;
    window.clearTimeout(card.opsgate.timer);
  }, true);

  // Turbo: a card whose Continue was answered with a new card (or a
  // notice) goes; Turbo replaces it on a success (a redirect).
  on("turbo:submit-end", function (e) {
    var form = e.target, card = form && form.closest ? form.closest(CARD) : null;
    if (!card || !card.isConnected) return;
    var d = e.detail || {}, res = d.fetchResponse && d.fetchResponse.response;
    if (res && res.status === 403 && newCard(card)) { remove(card); return; }
    if (!d.success) {
      card.opsgate.repeating = false;
      say(card, "Not done: the site answered " + (res ? res.status : "nothing") + ". Press Continue to try again.");
    }
  });

  new MutationObserver(scan).observe(document.documentElement, { childList: true, subtree: true });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  else scan();
})();
