/* skewscope compare HTML page: one before/after chart per signal, drawn from the embedded JSON
   (compare_document); runs after charts.js (which finds nothing of a diagnose report here).
   Values are only read; names from the report are set with textContent, never as HTML. */
(function () {
  "use strict";
  var doc = JSON.parse(document.getElementById("skewscope-report").textContent);
  var drawn = 0, failed = 0;
  // the figures of each side drawn as bars: how far the followed unit and the most unequal one
  // sit from their peers, and the spread of the unit means (1x = even)
  var FIGURES = [["hot_peer_ratio", "hot/peer"], ["worst_ratio", "worst unit"], ["max_median", "max/median"]];

  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }  // "inf", null: no bar
  function ratio(v) {
    if (v == null) return "—";
    var a = Math.abs(v);
    return (a >= 100 ? v.toLocaleString("en-US", { maximumFractionDigits: 0 }) : a >= 10 ? v.toFixed(1) : v.toFixed(2)) + "x";
  }
  // a log axis when the figures span more than 10x (a queue 4,000x its peers' beside 1x after),
  // from the power of ten at least 4x under the lowest bar, so every bar stays visible
  function logRange(lo, hi) {
    return [Math.pow(10, Math.floor(Math.log10(Math.min(lo, 1) / 4))), Math.pow(10, Math.ceil(Math.log10(hi)))];
  }

  function drawSignal(el) {
    var s = doc.signals[Number(el.getAttribute("data-signal"))];
    try {
      var xs = FIGURES.map(function (_, i) { return i; });
      var before = FIGURES.map(function (f) { return num(s.before[f[0]]); });
      var after = FIGURES.map(function (f) { return num(s.after[f[0]]); });
      var shown = before.concat(after, [1]).filter(function (v) { return v != null && v > 0; });
      var top = Math.max.apply(null, shown), low = Math.min.apply(null, shown);
      var log = top / low > 10;
      new uPlot({
        width: Math.max(280, Math.min(380, el.clientWidth || 360)), height: 190,
        scales: { x: { time: false, range: [-0.6, FIGURES.length - 0.4] },
                  y: log ? { distr: 3, range: logRange(low, top) } : { range: [0, top * 1.15] } },
        series: [
          { label: "figure", value: function (u, i) { return i == null ? "—" : FIGURES[i][1]; } },
          { label: "before", stroke: "#7b8794", fill: "rgba(123,135,148,0.55)", width: 1,
            paths: uPlot.paths.bars({ size: [0.38, 40], align: -1 }), points: { show: false },
            value: function (u, v) { return ratio(v); } },
          { label: "after", stroke: "#2e6da4", fill: "rgba(46,109,164,0.6)", width: 1,
            paths: uPlot.paths.bars({ size: [0.38, 40], align: 1 }), points: { show: false },
            value: function (u, v) { return ratio(v); } }
        ],
        axes: [
          { values: function (u, vals) { return vals.map(function (i) { return Number.isInteger(i) && FIGURES[i] ? FIGURES[i][1] : ""; }); },
            incrs: [1], size: 30 },
          { size: 64, values: function (u, vals) { return vals.map(ratio); } }
        ],
        legend: { live: true },
        hooks: {
          draw: [function (u) {  // 1x: the unit is even with its peers
            var y = u.valToPos(1, "y", true);
            u.ctx.save();
            u.ctx.strokeStyle = "#1b7f3a";
            u.ctx.setLineDash([5, 4]);
            u.ctx.beginPath();
            u.ctx.moveTo(u.bbox.left, y);
            u.ctx.lineTo(u.bbox.left + u.bbox.width, y);
            u.ctx.stroke();
            u.ctx.restore();
          }]
        }
      }, [xs, before, after], el);
      el.setAttribute("data-y-log", log ? "1" : "0");
      drawn += 1;
    } catch (err) {
      failed += 1;
      window.skewscopeShowError(el, err);
    }
  }

  document.querySelectorAll("div.compare-chart[data-signal]").forEach(drawSignal);
  document.body.setAttribute("data-charts-drawn", String(drawn));
  document.body.setAttribute("data-charts-failed", String(failed));
})();
