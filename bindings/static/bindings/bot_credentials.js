// The bot form shows the credential fields of the platform selected, and hides the others' (a field
// marked data-credential-platform="" belongs to platforms that declare no credentials). Hidden fields
// are still posted; the server reads only the selected platform's.
"use strict";
(function () {
  function rowOf(input) {
    return input.closest(".form-row") || input.parentElement;
  }
  function show() {
    var select = document.querySelector("select[data-credential-switch]");
    if (!select) return;
    var inputs = document.querySelectorAll("[data-credential-platform]");
    var declared = {};
    inputs.forEach(function (input) {
      if (input.dataset.credentialPlatform) declared[input.dataset.credentialPlatform] = true;
    });
    inputs.forEach(function (input) {
      var owner = input.dataset.credentialPlatform;
      var visible = owner ? owner === select.value : !declared[select.value];
      rowOf(input).hidden = !visible;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var select = document.querySelector("select[data-credential-switch]");
    if (!select) return;
    select.addEventListener("change", show);
    show();
  });
})();
