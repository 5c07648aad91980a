// Live progress on the scan page: poll the scan's status.json (every second while it runs: the
// worker publishes its figures that often) and update the status, the progress line, the
// worker's figures and their bar in place; once the scan runs, the "Scan queued" flash goes;
// when it ends, load the page once to show the result. No library, nothing from another site.
(function () {
  "use strict";
  var card = document.querySelector("[data-live-status]");
  if (!card) return;
  var url = card.getAttribute("data-live-status");
  var heading = document.querySelector("h1[data-status]");
  var RUNNING_MS = 1000, QUEUED_MS = 2000, HIDDEN_MS = 5000, RETRY_MS = 5000;

  function field(name) { return card.querySelector('[data-field="' + name + '"]'); }

  function set(name, text) {
    var el = field(name);
    if (el && text !== null && text !== undefined) el.textContent = text;
  }

  function showFigures(s) {
    var box = field("live-box"), bar = field("bar");
    if (!box) return;
    if (!s.live || !s.live_text) { box.hidden = true; return; }
    box.hidden = false;
    set("live", s.live_text);
    if (bar) {
      if (s.live.total) { bar.max = s.live.total; bar.value = s.live.completed; }
      else { bar.removeAttribute("value"); }  // the preflight: an indeterminate bar
    }
  }

  function dropQueuedFlash() {
    var flashes = document.querySelectorAll(".flash.scan-queued");
    for (var i = 0; i < flashes.length; i++) flashes[i].remove();
  }

  function next(ms) { window.setTimeout(poll, document.hidden ? Math.max(ms, HIDDEN_MS) : ms); }

  function poll() {
    fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin",
                cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (s) {
        if (heading) heading.setAttribute("data-status", s.status);
        var status = field("status");
        if (status) status.className = "status-" + s.status;
        set("status", s.status_label);
        if (s.started_at) set("started_at", s.started_at.replace("T", " ").slice(0, 19) + " UTC");
        if (s.status !== "queued") dropQueuedFlash();
        if (s.finished) {
          set("progress", "Finished: " + s.status_label.toLowerCase() + ". Loading the result…");
          window.location.reload();
          return;
        }
        set("progress", s.progress);
        showFigures(s);
        next(s.status === "running" ? RUNNING_MS : QUEUED_MS);
      })
      .catch(function () {
        set("progress", "Could not reach the site; trying again…");
        next(RETRY_MS);
      });
  }
  next(RUNNING_MS);
})();
