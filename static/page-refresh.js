// A page that keeps itself current: every few seconds (data-every-s on this script's tag) it
// fetches its own URL and swaps in the parts named by data-swap (selectors separated by "|").
// With data-changes-when (a selector), the parts are swapped only when that element's
// data-version differs in the fetched page (the endpoint page: a scan started, ended or
// changed the state), so nothing moves under the reader for nothing. Nothing is fetched while
// the tab is hidden; no library, nothing from another site.
(function () {
  "use strict";
  var script = document.currentScript;
  var everyMs = 1000 * Number((script && script.getAttribute("data-every-s")) || 15);
  var swapped = ((script && script.getAttribute("data-swap")) || "").split("|");
  var changesWhen = script && script.getAttribute("data-changes-when");

  function unchanged(doc) {
    if (!changesWhen) return false;
    var mine = document.querySelector(changesWhen), fresh = doc.querySelector(changesWhen);
    return !!(mine && fresh && mine.getAttribute("data-version") === fresh.getAttribute("data-version"));
  }

  function swap(doc) {
    if (!unchanged(doc)) {
      for (var i = 0; i < swapped.length; i++) {
        var mine = document.querySelector(swapped[i]), fresh = doc.querySelector(swapped[i]);
        if (mine && fresh) mine.replaceWith(document.importNode(fresh, true));
      }
    }
    document.body.setAttribute("data-refreshed-at", new Date().toISOString());
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
