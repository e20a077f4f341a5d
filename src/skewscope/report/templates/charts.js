/* skewscope HTML report: draws the charts from the embedded JSON report (report_document).
   Values are only read, never computed: series, peer bands and hot runs come from the analysis.
   Text from the report (unit names, labels) is set with textContent, never as HTML. */
(function () {
  "use strict";
  var doc = JSON.parse(document.getElementById("skewscope-report").textContent);
  var meta = JSON.parse(document.getElementById("skewscope-series-meta").textContent);
  var drawn = 0, failed = 0;
  var UNIT_COLORS = ["#c0392b", "#8e44ad", "#d35400", "#16a085", "#2c3e50"];

  function at(path) {
    var node = doc;
    path.split(".").filter(Boolean).forEach(function (k) {
      node = node == null ? null : node[/^\d+$/.test(k) ? Number(k) : k];
    });
    return node;
  }
  function reportOf(el) { return at(el.closest("section.report").getAttribute("data-report")); }
  function hms(ts) { return new Date(ts * 1e3).toISOString().slice(11, 19); }
  function stamp(ts) { return new Date(ts * 1e3).toISOString().slice(0, 19).replace("T", " ") + " UTC"; }
  function showError(el, err) {  // also the what-if page's
    var p = document.createElement("p");
    p.className = "chart-error";
    p.textContent = "chart not drawn: " + err;
    el.appendChild(p);
    console.error(err);
  }
  function fail(el, err) {
    failed += 1;
    showError(el, err);
  }
  function fmtValue(key, v) {
    if (v == null) return "—";
    if (meta[key] && meta[key].unit === "frac") return (100 * v).toFixed(0) + "%";
    var a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function shade(runs) {  // hot (or starved) windows of the finding, behind the lines
    return {
      hooks: {
        drawClear: [function (u) {
          var ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = "rgba(192, 57, 43, 0.12)";
          runs.forEach(function (r) {
            var x0 = u.valToPos(r.start_s, "x", true), x1 = u.valToPos(r.end_s, "x", true);
            ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height);
          });
          ctx.restore();
        }]
      }
    };
  }

  function drawFinding(section) {
    var f = at(section.getAttribute("data-finding"));
    var r = reportOf(section);
    var s = r && r.series;
    if (!f || !s) return;
    var half = r.window_s / 2;
    var xs = s.window_starts.map(function (w) { return w + half; });  // centre of each window
    var runs = f.timeline ? f.timeline.runs : [];
    section.querySelectorAll("div.plot").forEach(function (el) {
      var key = el.getAttribute("data-key");
      try {
        var band = f.peer_bands[key];
        var data = [xs, band.min, band.max, band.median];
        var series = [
          { label: "window", value: function (u, v) { return v == null ? "—" : stamp(v - half); } },
          { label: "peers min", stroke: "rgba(46,109,164,0.35)", width: 1, value: function (u, v) { return fmtValue(key, v); } },
          { label: "peers max", stroke: "rgba(46,109,164,0.35)", width: 1, value: function (u, v) { return fmtValue(key, v); } },
          { label: "peers median", stroke: "#2e6da4", width: 1.5, dash: [6, 4], value: function (u, v) { return fmtValue(key, v); } }
        ];
        f.units.forEach(function (unit, i) {
          data.push((s.values[key] || {})[unit] || xs.map(function () { return null; }));
          series.push({ label: unit, stroke: UNIT_COLORS[i % UNIT_COLORS.length], width: 2,
                        value: function (u, v) { return fmtValue(key, v); } });
        });
        var opts = {
          width: Math.max(320, Math.min(560, el.clientWidth || 540)),
          height: 200,
          series: series,
          bands: [{ series: [2, 1], fill: "rgba(46,109,164,0.12)" }],
          scales: { x: { time: true } },
          axes: [{ values: function (u, vals) { return vals.map(hms); } }, { size: 60, values: function (u, vals) { return vals.map(function (v) { return fmtValue(key, v); }); } }],
          legend: { live: true },
          plugins: [shade(runs)]
        };
        new uPlot(opts, data, el);
        drawn += 1;
      } catch (err) {
        fail(el, err);
      }
    });
  }

  function heatColor(v) {
    if (v == null) return "#dddddd";
    if (!isFinite(v)) return "rgb(192,57,43)";
    var t = Math.max(-1, Math.min(1, Math.log2(Math.max(v, 1e-3)) / 1.5));  // 1/2.8x .. 2.8x
    var base = t >= 0 ? [192, 57, 43] : [59, 111, 182];
    var a = Math.abs(t);
    var mix = base.map(function (c) { return Math.round(244 + (c - 244) * a); });
    return "rgb(" + mix.join(",") + ")";
  }

  function drawHeatmap(el) {
    var r = at(el.getAttribute("data-report"));
    var s = r && r.series;
    if (!s) return;
    try {
      var table = document.createElement("table");
      table.className = "heatmap";
      var units = r.units.map(function (u) { return u.unit; });
      var heat = {};
      r.units.forEach(function (u) { heat[u.unit] = u.heat_by_window || []; });
      var cell = Math.max(6, Math.min(28, Math.floor(900 / Math.max(1, s.window_starts.length)))) + "px";
      units.forEach(function (unit) {
        var tr = document.createElement("tr");
        var th = document.createElement("th");
        th.textContent = unit;
        tr.appendChild(th);
        s.window_starts.forEach(function (w, i) {
          var raw = heat[unit][i];  // null: not judged; "inf": the peers had none of it
          var v = typeof raw === "number" ? raw : raw === "inf" ? Infinity : null;
          var td = document.createElement("td");
          td.style.background = heatColor(v);
          td.style.width = cell;
          var hot = s.hot[unit] && s.hot[unit][i];
          if (hot) td.style.boxShadow = "inset 0 -3px 0 #7b1d12";
          var when = new Date(w * 1e3).toISOString().replace(".000Z", "Z");
          td.title = unit + " · " + when + " · " + (v == null ? "not judged" : isFinite(v) ? v.toFixed(2) + "x peers" : "peers had none") +
                     (hot ? " · hot" : "");
          tr.appendChild(td);
        });
        table.appendChild(tr);
      });
      var foot = document.createElement("tr");
      foot.appendChild(document.createElement("th"));
      var every = Math.max(1, Math.ceil(s.window_starts.length / 8));
      for (var i = 0; i < s.window_starts.length; i += every) {
        var td = document.createElement("td");
        td.colSpan = Math.min(every, s.window_starts.length - i);
        td.style.textAlign = "left";
        td.style.fontSize = "11px";
        td.style.color = "#5b6573";
        td.textContent = new Date(s.window_starts[i] * 1e3).toISOString().slice(11, 19);
        foot.appendChild(td);
      }
      table.appendChild(foot);
      el.appendChild(table);
      drawn += 1;
    } catch (err) {
      fail(el, err);
    }
  }

  function drawGatewayShares(el) {  // the gateway's share of requests per window, per upstream
    var r = at(el.getAttribute("data-report"));
    var g = r && r.gateway;
    if (!g || !g.window_starts.length) return;
    try {
      var half = r.window_s / 2;
      var xs = g.window_starts.map(function (w) { return w + half; });
      var data = [xs];
      var series = [{ label: "window", value: function (u, v) { return v == null ? "—" : stamp(v - half); } }];
      g.units.filter(function (u) { return u.share_series.length; }).forEach(function (u, i) {
        data.push(u.share_series);
        var color = u.diverged_from == null ? "#9aa5b1" : UNIT_COLORS[i % UNIT_COLORS.length];
        series.push({ label: u.unit || u.upstream, stroke: color, width: u.diverged_from == null ? 1.5 : 2.5,
                      points: { show: false },
                      value: function (p, v) { return v == null ? "—" : (100 * v).toFixed(0) + "%"; } });
      });
      new uPlot({
        width: Math.max(320, Math.min(720, el.clientWidth || 680)), height: 200, series: series,
        scales: { x: { time: true }, y: { range: [0, 1] } },
        axes: [{ values: function (u, vals) { return vals.map(hms); } },
               { size: 50, values: function (u, vals) { return vals.map(function (v) { return (100 * v).toFixed(0) + "%"; }); } }],
        legend: { live: true }
      }, data, el);
      drawn += 1;
    } catch (err) {
      fail(el, err);
    }
  }

  window.skewscopeHeatColor = heatColor;  // the what-if page colours its load shares alike
  window.skewscopeShowError = showError;
  document.querySelectorAll("section.finding[data-finding]").forEach(drawFinding);
  document.querySelectorAll("div.gateway-shares[data-report]").forEach(drawGatewayShares);
  document.querySelectorAll("div.heatmap[data-report]").forEach(drawHeatmap);
  document.body.setAttribute("data-charts-drawn", String(drawn));
  document.body.setAttribute("data-charts-failed", String(failed));
})();
