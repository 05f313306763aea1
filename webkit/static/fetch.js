// opsgate.fetch: operations on fetch-driven pages (§4
// "Websites", §6 W93, §8.2 W149). No build step, no dependency: load it
// from the kit, then call opsgate.fetch where you called fetch.
//
//   <script src="/_opsgate/fetch.js"></script>
//
//   const res = await opsgate.fetch("/api/orders/7/exchange", {
//     method: "POST",
//     headers: { "Content-Type": "application/json", Accept: "application/json" },
//     body: JSON.stringify({ size: "M" }),
//   }, {
//     onWaiting(ref) { showBanner("Approve this exchange in your personal agent"); },
//     onApproved() { showBanner("Approved. Exchanging\u2026"); },
//   });
//   // res is the handler's own response once the action was performed.
//
// When a gated request answers 403 {"error":"approval_required"} with a
// Poppy-Operation header, opsgate.fetch calls onWaiting(ref), asks the kit's
// status route every few seconds, and once the approval is recorded calls
// onApproved() and makes the same request again (same input and init), whose
// response it returns. Any other response is returned as it is, as is the
// 403 when it gives up: the operation expired or was performed elsewhere, the
// page was left, options.signal aborted, or options.timeout (ms, default 30
// minutes) passed; onGiveUp(reason) is then called.
//
// Send Accept: application/json so the Gate answers JSON rather than its
// waiting page. A body must be sendable twice: a string, FormData,
// URLSearchParams, Blob or ArrayBuffer (not a ReadableStream). A Request
// given as input is cloned before it is sent.
(function (global) {
  "use strict";
  var script = document.currentScript;
  var base = script && script.src ? new URL(".", script.src).pathname : "/_opsgate/";

  function refOf(res) {
    var h = res.headers.get("Poppy-Operation");
    var m = h && /(?:^|[,;\s])ref="([A-Za-z0-9._-]{1,2048})"/.exec(h);
    return m ? m[1] : null;
  }

  // statusOf is the status route the Gate named in X-Opsgate-Status (its
  // sealed handle carries the request's terms, so it also hears of an
  // approval of a newer revision of them, which the repeated request
  // takes), else the ref's, which knows only the ref's own revision.
  function statusOf(res, ref) {
    var h = res.headers.get("X-Opsgate-Status");
    if (h && h.indexOf(base + "status?w=") === 0 && h.length <= 8192) return h;
    return base + "status?ref=" + encodeURIComponent(ref);
  }

  function sleep(ms, signal) {
    return new Promise(function (resolve) {
      var t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener("abort", function () { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  // waitFor resolves "approved", or why it stopped waiting.
  async function waitFor(url, options) {
    var deadline = Date.now() + (options.timeout || 30 * 60 * 1000);
    var delay = options.interval || 2000;
    while (Date.now() < deadline) {
      await sleep(delay, options.signal);
      if (options.signal && options.signal.aborted) return "aborted";
      var res;
      try {
        res = await fetch(url, {
          credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
        });
      } catch (e) {
        delay = Math.min(10000, delay * 2);
        continue;
      }
      if (res.status === 200) {
        var body = await res.json().catch(function () { return null; });
        var status = body && body.status;
        if (status === "approved") return "approved";
        if (status === "performed") return "performed";
      } else if (res.status !== 503) {
        return "gone";
      }
      delay = Math.min(10000, Math.round(delay * 1.25));
    }
    return "timeout";
  }

  async function opsgateFetch(input, init, options) {
    options = options || {};
    var spare = input instanceof Request ? input.clone() : input;
    var res = await fetch(input, init);
    if (res.status !== 403) return res;
    var ref = refOf(res);
    if (!ref) return res;
    var body = await res.clone().json().catch(function () { return null; });
    if (!body || body.error !== "approval_required") return res;
    if (options.onWaiting) options.onWaiting(ref);
    var why = await waitFor(statusOf(res, ref), options);
    if (why !== "approved") {
      if (options.onGiveUp) options.onGiveUp(why);
      return res;
    }
    if (options.onApproved) options.onApproved();
    return opsgateFetch(spare, init, options);
  }

  global.opsgate = Object.assign(global.opsgate || {}, { fetch: opsgateFetch });
})(window);
