// nfsim sweep report: pass rates with their intervals and distributions, from #nfsim-data.
(function () {
  "use strict";
  var status = document.getElementById("nfsim-status");
  window.addEventListener("error", function (e) {
    status.setAttribute("data-state", "error");
    status.textContent = "error: " + e.message + " at " + e.lineno;
  });
  var D = JSON.parse(document.getElementById("nfsim-data").textContent);
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; });
  }
  function pct(x) { return (x * 100).toFixed(2) + " %"; }
  function num(x) { return Math.abs(x - Math.round(x)) < 1e-9 ? String(Math.round(x)) : x.toFixed(2); }
  function setText(c) {
    return c.set.length ? c.set.map(function (p) { return p[0] + "=" + p[1]; }).join(", ") : "the scenario as written";
  }

  // A horizontal 0–100 % bar with the 95 % interval as a whisker; the figure is also in text.
  function rateBar(rate, w) {
    w = w || 360;
    var h = 22, x = function (v) { return 4 + v * (w - 8); };
    var s = '<svg class="rate" width="' + w + '" height="' + h + '" role="img" aria-label="' + esc(pct(rate.passRate) + " passed, 95% interval " + pct(rate.ci95[0]) + " to " + pct(rate.ci95[1])) + '">';
    s += '<rect x="4" y="5" width="' + (w - 8) + '" height="12" fill="url(#fail-hatch)" stroke="var(--border)"/>';
    s += '<rect x="4" y="5" width="' + Math.max(0, x(rate.passRate) - 4) + '" height="12" fill="var(--ok)"/>';
    var a = x(rate.ci95[0]), b = x(rate.ci95[1]);
    s += '<path d="M' + a + " 2V20M" + a + " 11H" + b + "M" + b + ' 2V20" stroke="var(--fg)" stroke-width="1.6" fill="none"/>';
    [0.25, 0.5, 0.75].forEach(function (g) { s += '<line x1="' + x(g) + '" x2="' + x(g) + '" y1="5" y2="17" stroke="var(--bg)" stroke-opacity=".6"/>'; });
    return s + "</svg>";
  }

  function histogram(f) {
    var w = 520, h = 150, L = 44, B = 34, T = 10, R = 10;
    var n = f.hist.counts.length, max = Math.max.apply(null, f.hist.counts.concat([1]));
    var top = f.hist.lo + f.hist.width * n;
    var X = function (v) { return L + (v - f.hist.lo) / (top - f.hist.lo) * (w - L - R); };
    var Y = function (c) { return h - B - c / max * (h - B - T); };
    var s = '<svg class="hist" width="' + w + '" height="' + h + '" role="img" aria-label="' + esc(f.name + " histogram") + '">';
    s += '<line x1="' + L + '" x2="' + (w - R) + '" y1="' + (h - B) + '" y2="' + (h - B) + '" stroke="var(--border)"/>';
    s += '<text class="lane-sub" x="' + (L - 6) + '" y="' + (T + 8) + '" text-anchor="end">' + max + "</text>";
    s += '<text class="lane-sub" x="' + (L - 6) + '" y="' + (h - B) + '" text-anchor="end">0</text>';
    s += '<text class="lane-sub" transform="translate(10,' + ((h - B + T) / 2) + ') rotate(-90)" text-anchor="middle">runs</text>';
    f.hist.counts.forEach(function (c, i) {
      if (!c) return;
      var x0 = X(f.hist.lo + i * f.hist.width), x1 = X(f.hist.lo + (i + 1) * f.hist.width);
      s += '<rect class="bin" x="' + x0.toFixed(1) + '" y="' + Y(c).toFixed(1) + '" width="' + Math.max(1, x1 - x0 - 1).toFixed(1) + '" height="' + (h - B - Y(c)).toFixed(1) +
        '" fill="var(--accent)"><title>' + esc(num(f.hist.lo + i * f.hist.width) + "–" + num(f.hist.lo + (i + 1) * f.hist.width) + " " + f.unit + ": " + c + " runs") + "</title></rect>";
    });
    // Axis labels at a few round values.
    var ticks = 5;
    for (var k = 0; k <= ticks; k++) {
      var v = f.hist.lo + (top - f.hist.lo) * k / ticks;
      s += '<text class="lane-sub" x="' + X(v).toFixed(1) + '" y="' + (h - B + 13) + '" text-anchor="middle">' + num(v) + "</text>";
    }
    s += '<text class="lane-sub" x="' + ((L + w - R) / 2) + '" y="' + (h - 4) + '" text-anchor="middle">' + esc(f.name + (f.unit ? " (" + f.unit + ")" : "")) + "</text>";
    // Percentiles: dashed lines with their names (not told by colour).
    [["p50", "4 3"], ["p90", "2 2"], ["p99", "1 3"]].forEach(function (p, i) {
      var v = f.dist[p[0]], x = X(Math.min(v + f.hist.width / 2, top));
      s += '<line class="pct" data-p="' + p[0] + '" x1="' + x.toFixed(1) + '" x2="' + x.toFixed(1) + '" y1="' + T + '" y2="' + (h - B) + '" stroke="var(--fg)" stroke-dasharray="' + p[1] + '"/>';
      var right = x > w - R - 60;
      s += '<text class="guide-label" x="' + (right ? x - 3 : x + 3).toFixed(1) + '" y="' + (T + 10 + i * 12) + '" text-anchor="' + (right ? "end" : "start") + '">' + p[0] + " " + num(v) + "</text>";
    });
    return s + "</svg>";
  }

  var defs = '<svg width="0" height="0" style="position:absolute"><defs><pattern id="fail-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
    '<rect width="6" height="6" fill="var(--bad)" fill-opacity=".15"/><line x1="0" y1="0" x2="0" y2="6" stroke="var(--bad)" stroke-width="2"/></pattern></defs></svg>';
  var h = defs + "<h1>Sweep of " + esc(D.scenario) + "</h1>" +
    '<div class="meta"><span>file <code>' + esc(D.file) + "</code></span><span>seeds <b>" + esc(D.seeds) + "</b></span><span>" + D.runs + " runs</span>" +
    (D.shard ? "<span>shard " + esc(D.shard) + "</span>" : "") + "</div>" +
    '<div class="meta"><span>command:</span><code class="cmd" id="command">' + esc(D.command) + "</code></div>" +
    "<p>Pass rate: the share of runs in which every expectation held (green), with its 95 % Wilson interval (the whisker). Replay any run with <code>nfsim run " + esc(D.file) + " --seed SEED</code> and the combination's values.</p>";
  document.getElementById("head").innerHTML = h;

  var m = '<h2>Pass rate per combination</h2><table id="combos"><thead><tr><th>combination</th><th>runs</th><th>all expectations passed</th><th></th></tr></thead><tbody>';
  D.combos.forEach(function (c) {
    m += '<tr data-combo="' + c.combo + '"><td>' + esc(setText(c)) + "</td><td>" + c.rate.runs + (c.errors ? " (" + c.errors + " stopped early)" : "") + "</td><td>" + rateBar(c.rate) +
      '</td><td class="mono">' + pct(c.rate.passRate) + " [" + pct(c.rate.ci95[0]) + " – " + pct(c.rate.ci95[1]) + "]</td></tr>";
  });
  m += "</tbody></table>";
  D.combos.forEach(function (c) {
    m += '<section class="combo" data-combo="' + c.combo + '"><h2>Combination ' + c.combo + ": " + esc(setText(c)) + "</h2>";
    m += '<table class="exprates"><thead><tr><th>expectation</th><th>pass rate</th><th></th></tr></thead><tbody>';
    c.expectations.forEach(function (e) {
      m += '<tr class="exprate"><td>' + esc(e.name) + "</td><td>" + rateBar(e.rate, 300) + '</td><td class="mono">' + e.rate.passed + "/" + e.rate.runs + " = " + pct(e.rate.passRate) +
        " [" + pct(e.rate.ci95[0]) + " – " + pct(e.rate.ci95[1]) + "]</td></tr>";
    });
    m += "</tbody></table>";
    c.clients.forEach(function (cl) {
      m += "<h3>client " + esc(cl.client) + '</h3><div class="plots">';
      cl.figures.forEach(function (f) {
        m += '<figure>' + histogram(f) + "<figcaption>" + esc(f.name) + ": mean " + num(f.dist.mean) + ", min " + num(f.dist.min) + ", p50 " + num(f.dist.p50) + ", p90 " + num(f.dist.p90) +
          ", p99 " + num(f.dist.p99) + ", max " + num(f.dist.max) + (f.unit ? " " + f.unit : "") + "</figcaption></figure>";
      });
      m += "</div>";
    });
    m += "<p>First seeds that passed: <span class=mono>" + (c.passed_seeds.join(", ") || "none") + "</span>; that failed: <span class=mono>" + (c.failed_seeds.join(", ") || "none") + "</span></p></section>";
  });
  document.getElementById("sweep").innerHTML = m;
  status.setAttribute("data-state", "ok");
  status.setAttribute("data-combos", D.combos.length);
  status.textContent = "rendered " + D.combos.length + " combinations, " + D.runs + " runs";
})();
