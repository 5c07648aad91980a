// The endpoint form's "Test connection" without a page load: post what is typed to the test
// view (scans/pages/connection.py) and show the HTML fragment it answers; a model picked from
// the result goes into the Model field. Without JavaScript the same buttons submit the form to
// the test view, which answers the whole form again. No library, nothing from another site.
(function () {
  "use strict";
  var form = document.querySelector("form.endpoint-form");
  if (!form || !window.fetch || !window.FormData) return;
  var slot = form.querySelector(".connection-result-slot");
  var model = form.querySelector('input[name="model"]');
  var testButton = form.querySelector("[data-test-connection]");
  if (!slot || !model || !testButton) return;

  function test(button, picked) {
    var data = new FormData(form);
    data.delete("prompt_sample");  // files are for saving, not for a test
    data.delete("load_dataset");
    if (picked) { model.value = picked; data.set("model", picked); }
    testButton.disabled = true;
    var label = testButton.textContent;
    testButton.textContent = "Testing…";
    slot.setAttribute("aria-busy", "true");
    fetch(button.formAction || testButton.formAction, {
      method: "POST", body: data, credentials: "same-origin",
      headers: {"X-Tokvera-Fragment": "1", "Accept": "text/html"}
    }).then(function (r) { return r.text(); })
      .then(function (html) {
        slot.innerHTML = html;
        var result = slot.querySelector("[data-chosen-model]");
        if (result && !model.value.trim()) model.value = result.getAttribute("data-chosen-model");
      })
      .catch(function () {
        slot.innerHTML = '<div class="connection-result failed" data-connection="site"><p>Could not reach the site to run the test; try again.</p></div>';
      })
      .then(function () {
        testButton.disabled = false;
        testButton.textContent = label;
        slot.removeAttribute("aria-busy");
      });
  }

  form.addEventListener("click", function (event) {
    var button = event.target.closest("button");
    if (!button || !form.contains(button)) return;
    if (button === testButton) {
      event.preventDefault();
      test(button, null);
    } else if (button.name === "pick_model") {
      event.preventDefault();
      test(button, button.value);
    }
  });
})();
