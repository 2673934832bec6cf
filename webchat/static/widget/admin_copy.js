// The bot page's "Copy" button for the chat widget's embed snippet (webchat/templates/widget/admin_snippet.html).
"use strict";
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy-target]");
  if (!button) return;
  var field = document.getElementById(button.dataset.copyTarget);
  if (!field) return;
  function done() { button.textContent = button.dataset.copied || button.textContent; }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, function () { field.select(); });
  } else {
    // Over plain http the clipboard API is off: select the text, and the browser's own copy does the rest.
    field.select();
    if (document.execCommand && document.execCommand("copy")) done();
  }
});
