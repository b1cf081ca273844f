/* Draws every <figure data-chart="ID"> with the vendored uPlot from the JSON in <script id="ID">
 * (see ui/charts.py): bars per department and pool, or GPUs over time. Legends carry colour swatches and
 * show the values under the pointer; at rest they show each series' latest value (time charts; "no data
 * in this period" for a series without any) or how to read the groups (bars). A time chart's axis spans
 * the period of its figure (x_range), whatever the number of points; dragging across it zooms, a
 * double-click shows the whole period again. Figures arriving through htmx (live tables) are drawn too. */
(function () {
  "use strict";

  var COLORS = {capacity: "#5b6577", deserved: "#3b7dd8", allocated: "#5a9a00", over_quota: "#e08a3c",
                utilization: "#5a9a00"};
  var FILLS = {deserved: "#8fb4e3", allocated: "#76b900", over_quota: "#e08a3c"};
  // Whole GPUs only on the value axis.
  var GPU_STEPS = [1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000];
  var HEIGHT = 280;

  function fmt(v) {
    if (v == null) return "—";
    return String(Math.round(v * 100) / 100);
  }

  function yRange(u, min, max) {
    return [0, Math.max(1, Math.ceil((max || 0) * 1.08))];
  }

  function gpuAxis(unit) {
    return {
      label: unit, labelSize: 20, incrs: GPU_STEPS,
      values: function (u, splits) { return splits.map(function (v) { return v.toFixed(0); }); },
    };
  }

  var hhmm = null, day = null;
  function utc(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }

  // 24-hour UTC times; the date under the first tick of every day, and under the very first tick
  // unless the next one already starts a new day (two dates side by side would run into each other).
  function timeTicks(u, splits, axisIdx, space, incr) {
    hhmm = hhmm || uPlot.fmtDate("{HH}:{mm}");
    day = day || uPlot.fmtDate("{YYYY}-{MM}-{DD}");
    var days = splits.map(function (ts) { return day(utc(ts)); });
    return splits.map(function (ts, i) {
      if (incr >= 86400) return days[i];
      var dated = i === 0 ? days.length < 2 || days[1] === days[0] : days[i] !== days[i - 1];
      return hhmm(utc(ts)) + (dated ? "\n" + days[i] : "");
    });
  }

  var stamp = null;
  function timeOptions(fig) {
    stamp = stamp || uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
    var period = fig.x_range || [fig.x[0], fig.x[fig.x.length - 1]];
    // Nobody pointing at the chart (idx null): the latest values, not "—".
    var series = [{label: fig.x_label, value: function (u, v, s, idx) {
      return idx == null ? (fig.legend_rest || "") : stamp(utc(v));
    }}];
    fig.series.forEach(function (s) {
      series.push({
        label: s.label + " (" + fig.unit + ")", stroke: COLORS[s.key] || "#333", width: 2,
        dash: s.key === "deserved" ? [6, 4] : undefined,
        value: function (u, v, si, idx) { return idx == null ? (s.latest_text || fmt(s.latest)) : fmt(v); },
      });
    });
    return {
      tzDate: utc,
      // Not auto-ranged: uPlot would span the points only (and invent 1,000 days after a single one).
      scales: {x: {time: true, auto: false, min: period[0], max: period[1]}, y: {range: yRange}},
      series: series,
      axes: [{values: timeTicks, space: 60, size: 44}, gpuAxis(fig.unit)],
      cursor: {drag: {x: true, y: false, setScale: true}},
      legend: {live: true},
      hooks: {ready: [function (u) {
        // uPlot's own double-click spans the points; after it, the whole period again.
        u.over.addEventListener("dblclick", function () { u.setScale("x", {min: period[0], max: period[1]}); });
      }]},
    };
  }

  function barOptions(fig) {
    var n = fig.x.length, k = fig.series.length, slot = 0.8 / k;
    var series = [{
      label: fig.x_label,
      value: function (u, v, s, idx) { return idx == null || v == null ? (fig.legend_rest || "") : (fig.x_labels[v] || ""); },
    }];
    fig.series.forEach(function (s, j) {
      var starts = fig.x.map(function (i) { return i - 0.4 + j * slot; });
      series.push({
        label: s.label + " (" + fig.unit + ")", stroke: COLORS[s.key] || "#333", fill: FILLS[s.key] || "#999",
        width: 0, points: {show: false},
        paths: uPlot.paths.bars({
          disp: {x0: {unit: 1, values: function () { return starts; }},
                 size: {unit: 1, values: function () { return [slot * 0.92]; }}},
        }),
        value: function (u, v, si, idx) { return idx == null ? "" : fmt(v); },
      });
    });
    var rotate = n > 10;
    return {
      scales: {x: {time: false, range: [-0.5, n - 0.5]}, y: {range: yRange}},
      series: series,
      axes: [{
        splits: function () { return fig.x; },
        // "pool · department" on two lines under its group; slanted when the groups are many.
        values: function (u, splits) {
          return splits.map(function (i) { return (fig.x_labels[i] || "").replace(" · ", rotate ? " · " : "\n"); });
        },
        rotate: rotate ? 30 : 0, size: rotate ? 130 : 52, gap: 6, grid: {show: false},
      }, gpuAxis(fig.unit)],
      cursor: {drag: {x: false, y: false, setScale: false}, points: {show: false}},
      legend: {live: true},
      // At rest the legend names the series and says how to read a group (no empty "Deserved:").
      hooks: {setLegend: [function (u) {
        var figure = u.root.closest("figure");
        if (figure) figure.classList.toggle("legend-at-rest", u.cursor.idx == null);
      }]},
    };
  }

  function draw(figure) {
    if (figure.getAttribute("data-drawn") || typeof uPlot === "undefined") return;
    var source = document.getElementById(figure.getAttribute("data-chart"));
    var plot = figure.querySelector(".chart-plot");
    if (!source || !plot) return;
    var fig = JSON.parse(source.textContent);
    if (!fig.x.length) {
      // Nothing to draw: say so in words rather than an empty frame.
      var words = document.createElement("p");
      words.className = "empty chart-empty";
      words.textContent = fig.empty || "No data in this period.";
      plot.replaceWith(words);
      figure.setAttribute("data-drawn", "1");
      return;
    }
    var opts = fig.type === "time" ? timeOptions(fig) : barOptions(fig);
    opts.width = Math.max(320, plot.clientWidth || 640);
    opts.height = HEIGHT + (fig.type === "bars" && fig.x.length > 10 ? 80 : 0);
    var data = [fig.x].concat(fig.series.map(function (s) { return s.values; }));
    figure.setAttribute("data-drawn", "1");
    var chart = new uPlot(opts, data, plot);
    figure.uplot = chart;  // for the browser tests
    if (fig.type === "time") figure.classList.add("chart-zoomable");
    if (window.ResizeObserver) {
      var width = opts.width;
      new ResizeObserver(function () {
        var w = Math.max(320, plot.clientWidth);
        if (Math.abs(w - width) > 4) { width = w; chart.setSize({width: w, height: opts.height}); }
      }).observe(plot);
    }
  }

  function drawAll(root) {
    var scope = root && root.querySelectorAll ? root : document;
    if (scope.matches && scope.matches("figure[data-chart]")) draw(scope);
    Array.prototype.forEach.call(scope.querySelectorAll("figure[data-chart]"), draw);
  }

  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:load", function (event) { drawAll(event.target); });
})();
