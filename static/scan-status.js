// Live progress on the scan page: poll the scan's status.json every few seconds and update the
// status and progress lines in place; when the scan finishes, load the page once to show the
// report. No library, nothing from another site.
(function () {
  "use strict";
  var card = document.querySelector("[data-live-status]");
  if (!card) return;
  var url = card.getAttribute("data-live-status");
  var heading = document.querySelector("h1[data-status]");
  var EVERY_MS = 3000;

  function set(field, text) {
    var el = card.querySelector('[data-field="' + field + '"]');
    if (el && text !== null && text !== undefined) el.textContent = text;
  }

  function poll() {
    fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (s) {
        if (heading) heading.setAttribute("data-status", s.status);
        var status = card.querySelector('[data-field="status"]');
        if (status) status.className = "status-" + s.status;
        set("status", s.status_label);
        if (s.started_at) set("started_at", s.started_at.replace("T", " ").slice(0, 19) + " UTC");
        if (s.finished) {
          set("progress", "Finished: " + s.status_label.toLowerCase() + ". Loading the result…");
          window.location.reload();
          return;
        }
        set("progress", s.progress);
        window.setTimeout(poll, EVERY_MS);
      })
      .catch(function () {
        set("progress", "Could not reach the site; trying again…");
        window.setTimeout(poll, EVERY_MS * 3);
      });
  }
  window.setTimeout(poll, EVERY_MS);
})();
