// opsgate waiting page: auto-continue (§6 W93: "the website
// MAY make it again itself, such as from a page that waits for the
// approval"). Served as a file by the kit, so a Content-Security-Policy of
// script-src 'self' holds. Without JavaScript the Continue control works.
//
// The page names its status route in data-opsgate-status (an opaque handle,
// never the ref or revision). The script asks it every few seconds; once the
// approval is recorded ("approved") it makes the original request again by
// pressing Continue itself: submitting the form or following the link.
(function () {
  "use strict";
  var page = document.getElementById("opsgate-waiting");
  if (!page || !window.fetch) return;
  var url = page.getAttribute("data-opsgate-status");
  var control = document.getElementById("opsgate-continue");
  var state = document.getElementById("opsgate-state");
  if (!url || !control) return;

  var delay = 2000, maxDelay = 10000, deadline = Date.now() + 30 * 60 * 1000, done = false, timer = 0;

  function say(text) { if (state) state.textContent = text; }

  function repeat() {
    done = true;
    say("Approved. Continuing\u2026");
    if (control instanceof HTMLFormElement) {
      // The prototype's submit: a field named "submit" can't shadow it.
      HTMLFormElement.prototype.submit.call(control);
    } else if (control instanceof HTMLAnchorElement) {
      window.location.assign(control.href);
    }
  }

  function later() {
    if (done || Date.now() > deadline) return;
    delay = Math.min(maxDelay, Math.round(delay * 1.25));
    timer = window.setTimeout(poll, delay);
  }

  function poll() {
    if (done) return;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (res) {
        if (res.status === 200) return res.json();
        if (res.status === 503) return null; // try again later
        done = true; // unknown or expired: leave it to Continue
        return null;
      })
      .then(function (body) {
        if (done) return;
        var status = body && body.status;
        if (status === "approved") return repeat();
        if (status === "performing") say("This action is being done\u2026");
        if (status === "performed") { done = true; say("This action has been done."); return; }
        later();
      }, later);
  }

  // Once the page is being left (Continue pressed by hand or by an agent,
  // or any other navigation), a status answer still on its way must not
  // press Continue: a second submission would cancel the navigation under
  // way, as a page with user activation may, and repeat the request
  // behind the browser's back. Restored from the back/forward cache, the
  // page waits again.
  window.addEventListener("beforeunload", function () { done = true; });
  window.addEventListener("pageshow", function (e) {
    if (!e.persisted || Date.now() > deadline) return;
    done = false;
    delay = 2000;
    window.clearTimeout(timer); // one poll at a time
    timer = window.setTimeout(poll, delay);
  });

  timer = window.setTimeout(poll, delay);
})();
