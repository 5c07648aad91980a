// The dashboard keeps itself current: every few seconds (data-every-s on this script's tag) it
// fetches its own URL and swaps in the endpoints table's rows and the state summary, whatever
// columns the rows have. Nothing is fetched while the tab is hidden; no library, nothing from
// another site.
(function () {
  "use strict";
  var script = document.currentScript;
  var everyMs = 1000 * Number((script && script.getAttribute("data-every-s")) || 15);
  var SWAPPED = ["table.endpoints > tbody", "[data-summary]"];

  function swap(doc) {
    for (var i = 0; i < SWAPPED.length; i++) {
      var mine = document.querySelector(SWAPPED[i]), fresh = doc.querySelector(SWAPPED[i]);
      if (mine && fresh) mine.replaceWith(document.importNode(fresh, true));
    }
    var table = document.querySelector("table.endpoints");
    if (table) table.setAttribute("data-refreshed-at", new Date().toISOString());
  }

  function refresh() {
    if (document.hidden) { window.setTimeout(refresh, everyMs); return; }
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store",
                                 headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { swap(new DOMParser().parseFromString(html, "text/html")); })
      .catch(function () { /* the next round tries again */ })
      .then(function () { window.setTimeout(refresh, everyMs); });
  }
  window.setTimeout(refresh, everyMs);
})();
