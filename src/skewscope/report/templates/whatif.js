/* skewscope what-if HTML report: draws from the embedded JSON (WhatIfReport.to_dict()); runs
   after charts.js (which finds nothing of the diagnose report to draw here) and reuses its
   colour ramp. Values are only read, never computed beyond a share's distance from the fair
   share; every name from the report is set with textContent, never as HTML. */
(function () {
  "use strict";
  var doc = JSON.parse(document.getElementById("skewscope-report").textContent);
  var drawn = 0, failed = 0;

  function fail(el, err) {
    failed += 1;
    window.skewscopeShowError(el, err);
  }
  function fmt(metric, v) {
    if (v == null) return "—";
    if (/_ms$/.test(metric)) return Math.round(v).toLocaleString("en-US") + " ms";
    if (metric === "kv_peak") return (100 * v).toFixed(0) + "%";
    if (metric === "throughput_rps") return v.toFixed(2) + "/s";
    return v.toFixed(2) + "x";
  }

  // A log axis from the power of ten at least 4x under the lowest bar (uPlot's own range starts
  // at the decade just under it, so the lowest, often the recommended, bar was a sliver).
  function logRange(u, lo, hi) {
    if (!(lo > 0) || !(hi > 0)) return [1, 10];
    return [Math.pow(10, Math.floor(Math.log10(lo / 4))), Math.pow(10, Math.ceil(Math.log10(hi)))];
  }

  function drawBars(el) {
    var metric = el.getAttribute("data-metric");
    var log = el.getAttribute("data-log") === "1";
    try {
      var names = doc.policies.map(function (p) { return p.name; });
      var xs = names.map(function (_, i) { return i; });
      var ys = doc.policies.map(function (p) {
        var v = p.predicted[metric];
        return v == null || (log && v <= 0) ? null : v;
      });
      var rec = names.indexOf(doc.recommended);
      var opts = {
        width: Math.max(320, Math.min(560, el.clientWidth || 540)),
        height: 240,
        scales: { x: { time: false, range: [-0.6, names.length - 0.4] },
                  y: log ? { distr: 3, range: logRange } : { range: function (u, lo, hi) { return [0, hi * 1.1]; } } },
        series: [
          { label: "policy", value: function (u, i) { return i == null ? "—" : names[i]; } },
          { label: metric, stroke: "#2e6da4", fill: "rgba(46,109,164,0.45)", width: 1,
            paths: uPlot.paths.bars({ size: [0.6, 60] }), points: { show: false },
            value: function (u, v) { return fmt(metric, v); } }
        ],
        axes: [
          { values: function (u, vals) { return vals.map(function (i) { return Number.isInteger(i) && names[i] ? names[i] : ""; }); },
            rotate: -30, size: 80, incrs: [1], gap: 4 },
          { size: 96, values: function (u, vals) { return vals.map(function (v) { return fmt(metric, v); }); } }
        ],
        legend: { live: true },
        hooks: {
          draw: [function (u) {  // outline the recommended policy's bar
            el.setAttribute("data-y-range", u.scales.y.min + "," + u.scales.y.max);  // tests read it
            if (rec < 0 || rec === 0 || ys[rec] == null) return;
            var x = u.valToPos(rec, "x", true), y = u.valToPos(ys[rec], "y", true);
            var w = Math.max(6, (u.valToPos(1, "x", true) - u.valToPos(0, "x", true)) * 0.6);
            u.ctx.save();
            u.ctx.strokeStyle = "#1b7f3a";
            u.ctx.lineWidth = 3;
            u.ctx.strokeRect(x - w / 2, y, w, u.bbox.top + u.bbox.height - y);
            u.ctx.restore();
          }]
        }
      };
      new uPlot(opts, [xs, ys], el);
      drawn += 1;
    } catch (err) {
      fail(el, err);
    }
  }

  function shareColor(v, fair) {  // red above the fair share, blue below (charts.js' ramp)
    return window.skewscopeHeatColor(v == null || !(fair > 0) ? null : v / fair);
  }

  function drawShares(el) {
    try {
      var units = doc.service_model.units.map(function (u) { return u.unit; });
      var fair = units.length ? 1 / units.length : 0;
      var table = document.createElement("table");
      table.className = "shares";
      var head = document.createElement("tr");
      var corner = document.createElement("th");
      corner.textContent = "policy";
      head.appendChild(corner);
      units.forEach(function (u) {
        var th = document.createElement("th");
        th.textContent = u;
        head.appendChild(th);
      });
      table.appendChild(head);
      doc.policies.forEach(function (p) {
        var tr = document.createElement("tr");
        var th = document.createElement("td");
        th.textContent = p.name;
        tr.appendChild(th);
        units.forEach(function (u) {
          var v = p.unit_load[u];
          var td = document.createElement("td");
          td.className = "share";
          td.style.background = shareColor(v, fair);
          td.textContent = v == null ? "—" : (100 * v).toFixed(0) + "%";
          td.title = p.name + " · " + u + " · " + td.textContent + " of the load (fair: " +
                     (100 * fair).toFixed(0) + "%)";
          tr.appendChild(td);
        });
        table.appendChild(tr);
      });
      el.appendChild(table);
      drawn += 1;
    } catch (err) {
      fail(el, err);
    }
  }

  document.querySelectorAll("div.bars[data-metric]").forEach(drawBars);
  document.querySelectorAll("div.shares").forEach(drawShares);
  document.body.setAttribute("data-charts-drawn", String(drawn));
  document.body.setAttribute("data-charts-failed", String(failed));
})();
