// Size the framed report to its content, so the page scrolls once (not a box inside a box).
(function () {
  "use strict";
  document.querySelectorAll("iframe.report").forEach(function (frame) {
    function fit() {
      var doc = frame.contentDocument;
      if (doc && doc.documentElement) {
        frame.style.height = doc.documentElement.scrollHeight + "px";
      }
    }
    frame.addEventListener("load", fit);
    window.addEventListener("resize", fit);
    fit();
  });
})();
