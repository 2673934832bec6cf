// The binding form: the primary model is never offered among its own fallbacks. The fallback list (a
// select or checkboxes marked data-fallback-of="<primary's id>") hides, and unticks, the option the
// primary select holds, whenever that changes. The server refuses the pair whatever is posted.
"use strict";
(function () {
  function sync(fallback, primary) {
    var options = fallback.tagName === "SELECT"
      ? Array.prototype.slice.call(fallback.options)
      : Array.prototype.slice.call(fallback.querySelectorAll("input[type=checkbox]"));
    options.forEach(function (option) {
      var same = primary.value !== "" && option.value === primary.value;
      var holder = option.tagName === "OPTION" ? option : option.closest("li") || option.parentElement;
      holder.hidden = same;
      if (same) {
        if (option.tagName === "OPTION") option.selected = false; else option.checked = false;
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-fallback-of]").forEach(function (fallback) {
      var primary = document.getElementById(fallback.dataset.fallbackOf);
      if (!primary) return;
      primary.addEventListener("change", function () { sync(fallback, primary); });
      sync(fallback, primary);
    });
  });
})();
