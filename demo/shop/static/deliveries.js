// The deliveries page: changes a delivery's date with fetch, through the
// opsgate kit's fetch helper, so that a browser joined to an agent's Session
// waits for the agent's approval and then repeats the request.
// No inline script: the page's Content-Security-Policy allows 'self' only.
(function () {
  "use strict";

  // send makes the request through opsgate.fetch when the kit's helper is
  // loaded, and plain fetch otherwise (an ordinary browser needs nothing more).
  function send(url, init, hooks) {
    if (window.opsgate && typeof window.opsgate.fetch === "function") {
      return window.opsgate.fetch(url, init, hooks);
    }
    return window.fetch(url, init);
  }

  function setStatus(el, kind, text) {
    el.className = "status" + (kind ? " status--" + kind : "");
    el.textContent = text;
  }

  function wire(card) {
    var form = card.querySelector('[data-role="form"]');
    var status = card.querySelector('[data-role="status"]');
    var dateEl = card.querySelector('[data-role="date"]');
    var button = form.querySelector("button");
    var id = card.getAttribute("data-delivery");

    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var date = form.elements.date.value;
      var gaveUp = "";
      button.disabled = true;
      setStatus(status, "", "Saving…");
      send("/api/deliveries/" + encodeURIComponent(id), {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ date: date }),
      }, {
        onWaiting: function () {
          setStatus(status, "waiting", "Waiting for approval in your agent…");
        },
        onApproved: function () {
          setStatus(status, "", "Approved in your agent. Changing the date…");
        },
        onGiveUp: function (reason) {
          gaveUp = reason || "timeout";
        },
      }).then(function (res) {
        return res.json().catch(function () { return {}; }).then(function (body) {
          if (res.ok) {
            dateEl.textContent = body.date_text || body.date;
            setStatus(status, "ok", "Done: the delivery now arrives on " + (body.date_text || body.date) + ".");
            return;
          }
          if (res.status === 403 && body.error === "approval_required") {
            if (gaveUp) {
              setStatus(status, "error", "The date was not changed: no approval came from your agent. Try again.");
            } else {
              setStatus(status, "waiting", "Waiting for approval in your agent…");
            }
            return;
          }
          if (res.status === 403 && body.error === "confirmation_required" &&
              typeof body.confirm_url === "string" && body.confirm_url.charAt(0) === "/" && body.confirm_url.charAt(1) !== "/" && body.confirm_url.charAt(1) !== "\\") {
            // The shop's own login: confirm on the shop's page, with the password.
            setStatus(status, "", "Confirm the new date on the next page…");
            window.location.assign(body.confirm_url);
            return;
          }
          setStatus(status, "error", body.message || "The date could not be changed (" + res.status + ").");
        });
      }).catch(function () {
        setStatus(status, "error", "The shop could not be reached. Try again.");
      }).then(function () {
        button.disabled = false;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var cards = document.querySelectorAll("[data-delivery]");
    for (var i = 0; i < cards.length; i++) wire(cards[i]);
  });
})();
