// The admin home's chart: runs and messages per hour, from the JSON the page embeds (json_script), drawn with
// the Chart.js UMD build shipped beside this file (no CDN). Without the library the figures above still show.
(function () {
  "use strict";
  function draw() {
    var canvas = document.getElementById("console-per-hour");
    var data = document.getElementById("console-per-hour-data");
    if (!canvas || !data || typeof window.Chart === "undefined") return;
    var series = JSON.parse(data.textContent);
    var style = getComputedStyle(document.documentElement);
    var primary = style.getPropertyValue("--primary").trim() || "#79aec8";
    var accent = style.getPropertyValue("--secondary").trim() || "#417690";
    var text = style.getPropertyValue("--body-quiet-color").trim() || "#666";
    new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: series.labels,
        datasets: [
          { label: series.runsLabel, data: series.runs, backgroundColor: accent },
          { label: series.messagesLabel, data: series.messages, backgroundColor: primary },
        ],
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: {
          x: { ticks: { color: text, maxRotation: 0, autoSkip: true } },
          y: { beginAtZero: true, ticks: { color: text, precision: 0 } },
        },
        plugins: { legend: { labels: { color: text } } },
      },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
