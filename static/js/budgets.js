// The budgets pages' charts (Chart.js, vendored at static/vendor/chartjs). No inline JS (CSP):
// each <canvas data-chart="ID"> reads its data from <script type="application/json" id="ID">
// (Django's json_script), which the server fills with points, ticks and every label already
// formatted (money by Babel in the tenant's currency, days in its zone). This file only draws,
// and draws again when htmx swaps a chart's partial (a live push or a re-fetch): a chart whose
// canvas left the page is destroyed, a canvas without a chart gets one.
(function () {
  "use strict";

  // Colours from the page's design tokens (static/css/theme.css), so dark mode is dark here too.
  var css = window.getComputedStyle(document.documentElement);
  function token(name, fallback) { return (css.getPropertyValue(name) || "").trim() || fallback; }
  var DARK = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  var INK = token("--gavel-ink", "#1f2430");
  var MUTED = token("--gavel-muted", "#545b68");
  var LINE = token("--gavel-line", "#e3e6eb");
  var BLUE = DARK ? "#7aa2ff" : "#2d5bd1";
  var BLUE_FILL = DARK ? "rgba(122, 162, 255, 0.15)" : "rgba(45, 91, 209, 0.10)";
  var RED = DARK ? "#ff8a80" : "#b42318";
  var AMBER = "#c27c00";
  var GREY = "#9aa1ad";
  // Charts drawn before (by their data's id): a redraw does not animate. Canvases carry no id
  // on purpose: htmx settles the attributes of same-id elements across a swap, and copying
  // Chart.js's sizing `style` that way is an inline style the CSP refuses.
  var drawn = {};

  function labelsOf(ticks) {
    var map = {};
    ticks.forEach(function (tick) { map[tick.value] = tick.label; });
    return map;
  }

  function fixedTicks(ticks) {
    return function (axis) {
      axis.ticks = ticks.map(function (tick) { return { value: tick.value }; });
    };
  }

  function valueAxis(ticks) {
    var labels = labelsOf(ticks);
    return {
      type: "linear",
      min: 0,
      max: ticks.length ? ticks[ticks.length - 1].value : undefined,
      afterBuildTicks: fixedTicks(ticks),
      ticks: { color: MUTED, callback: function (value) { return labels[value] || ""; } },
      grid: { color: LINE },
      border: { display: false },
    };
  }

  function line(label, points, style) {
    var dataset = {
      label: label,
      data: points,
      borderColor: style.color,
      backgroundColor: style.fill || style.color,
      borderWidth: style.width || 2,
      borderDash: style.dash || [],
      pointRadius: style.points || 0,
      pointHoverRadius: 4,
      pointBackgroundColor: style.color,
      fill: style.fill ? "origin" : false,
      tension: 0,
      hideInLegend: !!style.hideInLegend,
      order: style.order === undefined ? 1 : style.order, // lower draws on top, lists first
    };
    if (style.pointStyle) dataset.pointStyle = style.pointStyle;
    if (style.noLine) dataset.showLine = false;
    return dataset;
  }

  function burn(data) {
    var xLabels = labelsOf(data.x.ticks);
    var datasets = [
      line("Spent", data.spent, { color: BLUE, fill: BLUE_FILL, width: 2.5, order: 0 }),
      line("Projected", data.projection, { color: BLUE, dash: [6, 5], width: 2, points: [0, 3] }),
      line("Ceiling", data.ceiling, { color: RED, width: 1.75 }),
    ];
    data.thresholds.forEach(function (threshold, n) {
      datasets.push(line("Alert threshold", threshold.points, {
        color: threshold.crossed ? AMBER : GREY, dash: [2, 3], width: 1.25, hideInLegend: n > 0,
      }));
    });
    if (data.alerts.length) {
      datasets.push(line("Alert sent", data.alerts, {
        color: AMBER, points: 6, pointStyle: "triangle", noLine: true,
      }));
    }
    return {
      type: "line",
      data: { datasets: datasets },
      options: {
        scales: {
          x: {
            type: "linear",
            min: 0,
            max: data.x.max,
            afterBuildTicks: fixedTicks(data.x.ticks),
            ticks: {
              color: MUTED, autoSkip: true, autoSkipPadding: 10, maxRotation: 0, // a phone drops labels, never overlaps them
              callback: function (value) { return xLabels[value] || ""; },
            },
            grid: {
              color: function (context) { // a light line for each day, a clear one per label
                return context.tick && xLabels[context.tick.value] ? LINE : token("--gavel-subtle", "#f3f4f6");
              },
            },
            border: { display: false },
          },
          y: valueAxis(data.y.ticks),
        },
        interaction: { mode: "nearest", intersect: false },
        plugins: {
          legend: {
            align: "end",
            labels: { // a short stroke per line, dashed or dotted as the line is
              color: INK, boxWidth: 26, boxHeight: 0,
              filter: function (item, chart) { return !chart.datasets[item.datasetIndex].hideInLegend; },
            },
          },
          tooltip: {
            callbacks: {
              title: function (items) { return items.length ? items[0].raw.t : ""; },
              label: function (item) { return item.dataset.label + ": " + item.raw.v; },
            },
          },
        },
      },
    };
  }

  function shorten(text) {
    return text.length > 26 ? text.slice(0, 25) + "…" : text;
  }

  function bars(data) {
    var value = valueAxis(data.ticks);
    var keys = {
      ticks: {
        color: INK, autoSkip: !data.horizontal, maxRotation: 0,
        callback: function (v) { return shorten(String(this.getLabelForValue(v))); },
      },
      grid: { display: false },
      border: { color: LINE },
    };
    return {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: [{
          label: "Spent", data: data.values, backgroundColor: BLUE, hoverBackgroundColor: "#1c3f99",
          borderRadius: 3, maxBarThickness: data.horizontal ? 20 : 28,
        }],
      },
      options: {
        indexAxis: data.horizontal ? "y" : "x",
        scales: data.horizontal ? { x: value, y: keys } : { x: keys, y: value },
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { label: function (item) { return data.valueLabels[item.dataIndex]; } } },
        },
      },
    };
  }

  function draw(canvas) {
    if (Chart.getChart(canvas)) return;
    var name = canvas.getAttribute("data-chart");
    var holder = document.getElementById(name);
    if (!holder) return;
    var data;
    try {
      data = JSON.parse(holder.textContent);
    } catch (error) {
      return;
    }
    var config = data.kind === "burn" ? burn(data) : bars(data);
    config.options.responsive = true;
    config.options.maintainAspectRatio = false;
    config.options.animation = drawn[name] ? false : { duration: 350 };
    new Chart(canvas, config);
    drawn[name] = true;
  }

  function drawAll() {
    if (typeof Chart === "undefined") return;
    Object.keys(Chart.instances).forEach(function (key) {
      var chart = Chart.instances[key];
      if (!document.contains(chart.canvas)) chart.destroy();
    });
    Array.prototype.forEach.call(document.querySelectorAll("canvas[data-chart]"), draw);
  }

  var queued = false;
  function soon() {
    if (queued) return;
    queued = true;
    window.requestAnimationFrame(function () {
      queued = false;
      drawAll();
    });
  }

  if (typeof Chart !== "undefined") {
    Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    Chart.defaults.font.size = 12;
    Chart.defaults.color = MUTED;
  }
  ["htmx:afterSwap", "htmx:oobAfterSwap", "htmx:afterSettle", "gavel:live-message"].forEach(
    function (name) { document.addEventListener(name, soon); }
  );
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll);
  else drawAll();
})();
