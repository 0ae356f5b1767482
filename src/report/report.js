// nfsim report: draws the run's lanes from the JSON in #nfsim-data. No network, no libraries.
(function () {
  "use strict";
  var status = document.getElementById("nfsim-status");
  function fail(msg) {
    status.setAttribute("data-state", "error");
    status.textContent = "error: " + msg;
  }
  window.addEventListener("error", function (e) { fail(e.message + " at " + e.lineno); });

  var D = JSON.parse(document.getElementById("nfsim-data").textContent);
  var END = Math.max(D.meta.end_ns, 1);
  var MIN_WINDOW = 1e6; // 1 ms
  var LABEL_W = 370, PAD_R = 14, AXIS_H = 40;
  // Okabe & Ito's colour-blind-safe palette (black left out: it is the text colour).
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#8c8c8c"];
  var OUTCOME = { a: "answered", t: "timed out", r: "refused", f: "failed", p: "no outcome by the end" };
  var END_TEXT = { open: "alive at the end of the run", cleanup: "deleted by kube-proxy's cleanup", deleted: "deleted from userspace (conntrack -D)", dropped: "early-dropped (table full)", destroy: "timed out (DESTROY)" };
  var PHASE = { u: "UNREPLIED", r: "replied, not ASSURED", a: "ASSURED" };
  var POD = {
    ready: "Ready", notready: "not Ready", "killed-ready": "OOMKilled, still Ready",
    killed: "OOMKilled, not Ready", terminating: "terminating", gone: "gone", absent: "not created yet"
  };
  var EPS = { ready: "ready", serving: "not ready, serving", notserving: "not ready, not serving", terminating: "terminating", absent: "not in the slice" };
  var view = { t0: 0, t1: END };
  var hits = [];
  var selected = -1;
  var showAllServices = false;

  function colour(i) { return i === null || i === undefined ? "var(--muted)" : PALETTE[i % PALETTE.length]; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; });
  }
  function pad(n, w) { n = String(n); while (n.length < w) n = "0" + n; return n; }
  function hms(ns, ms) {
    var t = Math.round(ns / 1e6), h = Math.floor(t / 3600000), m = Math.floor(t / 60000) % 60, s = Math.floor(t / 1000) % 60;
    var out = pad(h, 2) + ":" + pad(m, 2) + ":" + pad(s, 2);
    return ms === false ? out : out + "." + pad(t % 1000, 3);
  }
  function dur(ns) {
    if (ns >= 3600e9) return (ns / 3600e9).toFixed(ns % 3600e9 ? 2 : 0) + " h";
    if (ns >= 60e9) return (ns / 60e9).toFixed(ns % 60e9 ? 1 : 0) + " min";
    if (ns >= 1e9) return (ns / 1e9).toFixed(ns % 1e9 ? 2 : 0) + " s";
    return (ns / 1e6).toFixed(ns % 1e6 ? 2 : 0) + " ms";
  }
  function parseHms(s) {
    var m = /^(\d+):(\d+):(\d+)(?:\.(\d+))?$/.exec(s || "");
    if (!m) return null;
    return ((+m[1] * 3600 + +m[2] * 60 + +m[3]) * 1000 + (m[4] ? +m[4].slice(0, 3) : 0)) * 1e6;
  }
  function epLabel(i) {
    if (i === null || i === undefined) return "no endpoint";
    var e = D.endpoints[i];
    return e.label === e.ip ? e.ip : e.label + " " + e.ip;
  }
  function shortEp(i) {
    if (i === null || i === undefined) return "no endpoint";
    var e = D.endpoints[i], name = e.label.split("/").pop();
    return name === e.ip ? e.ip : name + " " + e.ip;
  }
  function fit(s, px, size) {
    var n = Math.max(4, Math.floor(px / (size * 0.58)));
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }
  function hit(title, lines) { hits.push({ title: title, lines: lines || [] }); return hits.length - 1; }

  // ---------- header, legend, tables ----------
  function header() {
    var m = D.meta, n = D.expectations.length, failed = D.expectations.filter(function (x) { return !x.passed; }).length;
    var h = "<h1>" + esc(m.name) + "</h1>";
    if (m.description) h += "<p>" + esc(m.description) + "</p>";
    if (m.headline) h += '<p class="headline" id="headline">' + esc(m.headline) + "</p>";
    h += '<div class="meta"><span class="badge ' + (m.passed ? "pass" : "fail") + '" id="verdict">' +
      (m.passed ? "✓ PASS" : "✗ FAIL") + "</span><span>" + (n - failed) + " of " + n + " expectations passed</span>" +
      "<span>seed <b id='seed'>" + m.seed + "</b></span><span>file <code>" + esc(m.file) + "</code></span>" +
      "<span>simulated " + dur(END) + ", " + m.events + " events</span></div>" +
      '<div class="meta"><span>replay:</span><code class="cmd" id="command">' + esc(m.command) + "</code>" +
      '<button type="button" id="copy">copy</button></div>';
    if (m.aggregated_clients || m.aggregated_conntrack) {
      h += "<p>Large run: " + (m.aggregated_clients ? "queries are counted per node and per Service" : "") +
        (m.aggregated_clients && m.aggregated_conntrack ? "; " : "") +
        (m.aggregated_conntrack ? "conntrack entries are counted per node" : "") +
        ", in " + dur(D.agg.bucket_ns) + " buckets. Hover a column for its counts and a sample line.</p>";
    }
    document.getElementById("head").innerHTML = h;
    var copy = document.getElementById("copy");
    copy.addEventListener("click", function () {
      if (navigator.clipboard) navigator.clipboard.writeText(m.command).then(function () { copy.textContent = "copied"; }, function () {});
    });
  }

  function glyph(kind, x, y, c, extra) {
    extra = extra || "";
    switch (kind) {
      case "a": return '<circle cx="' + x + '" cy="' + y + '" r="4.2" fill="' + c + '"' + extra + "/>";
      case "t": return '<path d="M' + (x - 4) + " " + (y - 4) + "L" + (x + 4) + " " + (y + 4) + "M" + (x - 4) + " " + (y + 4) + "L" + (x + 4) + " " + (y - 4) +
        '" stroke="' + c + '" stroke-width="2.6" stroke-linecap="round" fill="none"' + extra + "/>" +
        '<rect x="' + (x - 5) + '" y="' + (y - 5) + '" width="10" height="10" fill="transparent"' + extra + "/>";
      case "r": return '<path d="M' + (x - 5) + " " + (y - 4) + "L" + (x + 5) + " " + (y - 4) + "L" + x + " " + (y + 5) + 'Z" fill="' + c + '"' + extra + "/>";
      case "f": return '<path d="M' + x + " " + (y - 5) + "L" + (x + 5) + " " + y + "L" + x + " " + (y + 5) + "L" + (x - 5) + " " + y + 'Z" fill="' + c + '"' + extra + "/>";
      default: return '<circle cx="' + x + '" cy="' + y + '" r="3.8" fill="none" stroke="' + c + '" stroke-width="1.6"' + extra + "/>";
    }
  }

  function swatch(fill, stroke) {
    return '<svg width="26" height="12" aria-hidden="true"><defs>' + patternDefs() + '</defs><rect x="1" y="1" width="24" height="10" fill="' + fill + '" stroke="' + (stroke || "none") + '"/></svg>';
  }

  function legend() {
    var h = "";
    ["a", "t", "r", "f", "p"].forEach(function (k) {
      h += '<span class="item"><svg width="14" height="14" aria-hidden="true">' + glyph(k, 7, 7, "var(--fg)") + "</svg>query " + OUTCOME[k] + "</span>";
    });
    D.endpoints.forEach(function (e, i) {
      if (i < 12) h += '<span class="item"><svg width="14" height="14" aria-hidden="true"><rect x="1" y="1" width="12" height="12" fill="' + colour(i) + '"/></svg>' + esc(epLabel(i)) + "</span>";
    });
    h += '<span class="item">' + swatch("url(#hatch-fg)", "var(--fg)") + "entry UNREPLIED</span>";
    h += '<span class="item">' + swatch("var(--muted)") .replace('fill="var(--muted)"', 'fill="var(--fg)" fill-opacity=".4"') + "entry replied</span>";
    h += '<span class="item">' + swatch("var(--fg)") + "entry ASSURED (colour: its endpoint); ticks: packets refreshing its timer</span>";
    h += '<span class="item"><svg width="20" height="14" aria-hidden="true"><path d="M4 2L14 7L4 12Z" fill="var(--fg)"/></svg>entry alive at the end</span>';
    h += '<span class="item"><svg width="20" height="14" aria-hidden="true"><line x1="8" y1="1" x2="8" y2="13" class="endcap"/></svg>DESTROY</span>';
    h += '<span class="item"><svg width="20" height="14" aria-hidden="true">' + cleanupGlyph(9, 7) + "</svg>deleted by kube-proxy's cleanup</span>";
    h += '<span class="item">' + swatch("var(--ok)") + "pod Ready</span>";
    h += '<span class="item">' + swatch("url(#hatch-ok)", "var(--ok)") + "pod not Ready</span>";
    h += '<span class="item">' + swatch("url(#hatch-bad)", "var(--bad)") + "pod OOMKilled, still Ready</span>";
    h += '<span class="item">' + swatch("url(#cross-bad)", "var(--bad)") + "pod OOMKilled, not Ready</span>";
    h += '<span class="item">' + swatch("url(#dots-fg)", "var(--fg)") + "terminating</span>";
    document.getElementById("legend").innerHTML = h;
  }

  function tables() {
    var h = '<div class="tables"><h2>Expectations</h2><table id="expectations"><thead><tr><th>verdict</th><th>expectation</th><th>line</th><th>checked at</th><th>observed</th></tr></thead><tbody>';
    D.expectations.forEach(function (x, i) {
      h += '<tr class="exp" data-exp="' + i + '" data-verdict="' + (x.passed ? "PASS" : "FAIL") + '" title="click: show the run around ' + esc(x.at) + '"><td class="verdict ' +
        (x.passed ? "pass" : "fail") + '">' + (x.passed ? "✓ PASS" : "✗ FAIL") + "</td><td>" + esc(x.name) + "</td><td>" + x.line +
        "</td><td class=mono>" + esc(x.at) + '</td><td class="observed">' + esc(x.detail) + "</td></tr>";
    });
    D.skipped.forEach(function (n) {
      h += '<tr data-verdict="SKIP"><td class="verdict">– SKIP</td><td>' + esc(n) + "</td><td></td><td></td><td>after --until</td></tr>";
    });
    h += '</tbody></table><h2>Summary</h2><pre class="summary">' + esc(D.summary) + "</pre></div>";
    var el = document.getElementById("tables");
    el.innerHTML = h;
    el.addEventListener("click", function (e) {
      var tr = e.target.closest && e.target.closest("tr.exp");
      if (!tr) return;
      var t = parseHms(D.expectations[+tr.getAttribute("data-exp")].at);
      if (t === null) return;
      zoomTo(t - 60e9, t + 10e9);
      window.scrollTo({ top: 0 });
    });
  }

  // ---------- patterns ----------
  function patternDefs() {
    var h = "";
    function hatch(id, c, bg) {
      h += '<pattern id="' + id + '" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
        (bg ? '<rect width="6" height="6" fill="' + bg + '" fill-opacity=".18"/>' : "") +
        '<line x1="0" y1="0" x2="0" y2="6" stroke="' + c + '" stroke-width="2.6"/></pattern>';
    }
    hatch("hatch-fg", "var(--fg)");
    hatch("hatch-ok", "var(--ok)");
    hatch("hatch-muted", "var(--muted)");
    D.endpoints.forEach(function (e, i) { hatch("hatch-" + i, colour(i), colour(i)); });
    h += '<pattern id="cross-bad" width="7" height="7" patternUnits="userSpaceOnUse"><rect width="7" height="7" fill="var(--bad)" fill-opacity=".25"/>' +
      '<path d="M0 0L7 7M7 0L0 7" stroke="var(--bad)" stroke-width="1.6"/></pattern>';
    h += '<pattern id="cross-muted" width="7" height="7" patternUnits="userSpaceOnUse"><path d="M0 0L7 7M7 0L0 7" stroke="var(--muted)" stroke-width="1.3"/></pattern>';
    h += '<pattern id="dots-fg" width="5" height="5" patternUnits="userSpaceOnUse"><circle cx="2.5" cy="2.5" r="1.2" fill="var(--fg)"/></pattern>';
    h += '<pattern id="hatch-bad" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><line x1="0" y1="0" x2="0" y2="6" stroke="var(--bad)" stroke-width="2.6"/></pattern>';
    return h;
  }
  function cleanupGlyph(x, y) {
    return '<circle cx="' + x + '" cy="' + y + '" r="5.5" fill="var(--bg)" stroke="var(--bad)" stroke-width="1.8"/><path d="M' + (x - 3) + " " + (y - 3) + "L" + (x + 3) + " " + (y + 3) + "M" + (x - 3) + " " + (y + 3) + "L" + (x + 3) + " " + (y - 3) + '" stroke="var(--bad)" stroke-width="1.8"/>';
  }

  // ---------- the chart ----------
  var W = 1000, PW = 900;
  function X(t) { return LABEL_W + (t - view.t0) / (view.t1 - view.t0) * PW; }
  function clampX(x) { return Math.max(LABEL_W - 2, Math.min(LABEL_W + PW + 2, x)); }
  function visible(t0, t1) { return t1 >= view.t0 && t0 <= view.t1; }
  function r1(x) { return Math.round(x * 10) / 10; }

  function tickStep(span) {
    var steps = [1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10, 15e9, 3e10, 6e10, 12e10, 3e11, 6e11, 9e11, 18e11, 36e11];
    var want = span / Math.max(3, PW / 110);
    for (var i = 0; i < steps.length; i++) if (steps[i] >= want) return steps[i];
    return steps[steps.length - 1];
  }

  function draw() {
    hits = [];
    var main = document.querySelector("main");
    W = Math.max(760, main.clientWidth || 1000);
    PW = W - LABEL_W - PAD_R;
    var body = "", y = AXIS_H + 4, lanes = 0, entries = 0, clientLanes = 0;
    var counts = { clientLanes: 0, ctLanes: 0, entryBars: 0, podLanes: 0, epsLanes: 0, kpLanes: 0, aggLanes: 0 };

    function section(title, note) {
      body += '<text class="sec-title" x="4" y="' + (y + 15) + '">' + esc(title) + "</text>";
      if (note) body += '<text class="sec-note" x="' + (LABEL_W) + '" y="' + (y + 15) + '">' + esc(note) + "</text>";
      y += 22;
    }
    function laneStart(id, label, sub, h) {
      body += '<g class="lane" data-lane="' + esc(id) + '" data-y="' + y + '" data-h="' + h + '">';
      body += '<rect class="lane-bg" x="0" y="' + y + '" width="' + W + '" height="' + h + '"/>';
      body += '<text class="lane-label" x="4" y="' + (y + 13) + '"><title>' + esc(label) + "</title>" + esc(fit(label, 170, 12.5)) + "</text>";
      if (sub) body += '<text class="lane-sub" x="4" y="' + (y + 26) + '"><title>' + esc(sub) + "</title>" + esc(fit(sub, 175, 11)) + "</text>";
    }
    function laneEnd(h) { body += "</g>"; y += h + 4; lanes++; }

    // Clients (detailed).
    if (D.clients.length) {
      section("Clients", "each row: the endpoint the query reached; shape: its outcome; line: send → outcome");
      D.clients.forEach(function (c) {
        var rows = c.rows.length ? c.rows : [null];
        var rh = 18, h = Math.max(34, rows.length * rh + 6);
        laneStart("client:" + c.name, c.name, (c.node ? c.node + " → " : "→ ") + c.target, h);
        var rowY = {};
        rows.forEach(function (ep, i) {
          var yy = y + 3 + i * rh + rh / 2;
          rowY[ep === null ? "n" : ep] = yy;
          body += '<line class="grid" x1="' + LABEL_W + '" x2="' + (LABEL_W + PW) + '" y1="' + yy + '" y2="' + yy + '"/>';
          body += '<text class="row-label halo" x="' + (LABEL_W - 6) + '" y="' + (yy + 4) + '" text-anchor="end" fill="' + colour(ep) + '">' + esc(fit("→ " + shortEp(ep), 180, 11)) + "</text>";
        });
        var lastX = -1e9;
        c.queries.forEach(function (q) {
          var t1 = q.t1 === null ? END : q.t1;
          if (!visible(q.t0, t1)) return;
          var x0 = X(q.t0), x1 = X(t1), yy = rowY[q.ep === null ? "n" : q.ep], col = colour(q.ep);
          if (x1 - x0 > 2) body += '<line class="qline" x1="' + r1(clampX(x0)) + '" x2="' + r1(clampX(x1)) + '" y1="' + yy + '" y2="' + yy + '" stroke="' + col + '"/>';
          if (x0 < LABEL_W - 1) return;
          var id = hit(c.name + " query #" + q.id + ": " + OUTCOME[q.outcome] + " — " + epLabel(q.ep) + (q.tries > 1 ? " (" + q.tries + " tries)" : "") +
            (q.t1 !== null ? ", " + dur(q.t1 - q.t0) : ""), q.lines);
          body += '<g class="hit q" data-h="' + id + '" data-outcome="' + q.outcome + '" data-t0="' + q.t0 + '">' + glyph(q.outcome, r1(x0), yy, col) + "</g>";
          lastX = x0;
        });
        laneEnd(h);
        counts.clientLanes++;
      });
    }

    // Aggregated clients.
    if (D.agg && D.meta.aggregated_clients) {
      section("Queries per node (clients aggregated)", "bar height: queries finished per bucket; solid: answered; hatched: timed out; crossed: refused; dotted: failed");
      D.agg.nodes.forEach(function (a) { aggLane("node:" + a.name, a.name, a); counts.aggLanes++; });
      var svcs = D.agg.services.slice().sort(function (p, q) {
        var fp = p.total[1] + p.total[2] + p.total[3], fq = q.total[1] + q.total[2] + q.total[3];
        return fq - fp || (p.name < q.name ? -1 : p.name > q.name ? 1 : 0);
      });
      var shown = showAllServices ? svcs : svcs.slice(0, 30);
      section("Queries per Service", svcs.length > shown.length ? "the 30 with the most failures of " + svcs.length + " (see the button below the chart)" : "");
      shown.forEach(function (a) { aggLane("service:" + a.name, a.name, a); counts.aggLanes++; });
    }

    // Conntrack entries.
    if (D.conntrack.length) {
      section("Conntrack entries", "bar: NEW → DESTROY; hatched UNREPLIED, light replied, solid ASSURED; ticks: client packets refreshing the timer");
      D.conntrack.forEach(function (l) {
        var rh = 26, h = Math.max(34, l.rows * rh + 6);
        laneStart("conntrack:" + l.node, l.node, l.entries.length + " entr" + (l.entries.length === 1 ? "y" : "ies"), h);
        l.entries.forEach(function (e) {
          var t1 = e.t1 === null ? END : e.t1;
          if (!visible(e.t0, t1)) return;
          var yy = y + 15 + e.row * rh, bh = 9, col = colour(e.ep);
          var id = hit("conntrack " + l.node + ": " + e.label + " — " + (END_TEXT[e.end] || e.end) +
            " (" + dur(t1 - e.t0) + ")" + (e.refresh.length ? "; " + e.refresh.length + " refreshes" : ""), e.lines);
          body += '<g class="hit entry" data-h="' + id + '" data-node="' + esc(l.node) + '" data-t0="' + e.t0 + '" data-t1="' + (e.t1 === null ? "" : e.t1) + '" data-end="' + e.end + '" data-ep="' + esc(e.ep === null ? "" : D.endpoints[e.ep].ip) + '">';
          e.phases.forEach(function (p, i) {
            var pt1 = i + 1 < e.phases.length ? e.phases[i + 1].t : t1;
            if (!visible(p.t, pt1)) return;
            var a = clampX(X(p.t)), b = clampX(X(pt1)), w = Math.max(1.5, b - a);
            var fill = p.p === "u" ? "url(#hatch-" + e.ep + ")" : col;
            var op = p.p === "r" ? ' fill-opacity=".4"' : "";
            body += '<rect class="phase" data-phase="' + p.p + '" x="' + r1(a) + '" y="' + yy + '" width="' + r1(w) + '" height="' + bh + '" fill="' + fill + '"' + op + ' stroke="' + col + '" stroke-width="1"/>';
          });
          e.refresh.forEach(function (t) {
            if (t < view.t0 || t > view.t1) return;
            var x = r1(X(t));
            body += '<line class="tick-refresh" x1="' + x + '" x2="' + x + '" y1="' + (yy + 2) + '" y2="' + (yy + bh - 2) + '"/>';
          });
          var xe = X(t1);
          if (xe <= LABEL_W + PW + 1) {
            if (e.end === "open") body += '<path d="M' + r1(xe) + " " + (yy - 1) + "L" + r1(xe + 8) + " " + (yy + bh / 2) + "L" + r1(xe) + " " + (yy + bh + 1) + 'Z" fill="' + col + '" stroke="var(--fg)" stroke-width="1"/>';
            else if (e.end === "cleanup" || e.end === "deleted" || e.end === "dropped") body += cleanupGlyph(r1(xe), yy + bh / 2);
            else body += '<line class="endcap" x1="' + r1(xe) + '" x2="' + r1(xe) + '" y1="' + (yy - 2) + '" y2="' + (yy + bh + 2) + '"/>';
          }
          var lx = Math.max(LABEL_W + 2, X(e.t0) + 1);
          if (Math.min(X(t1), LABEL_W + PW) - lx > 160) {
            var ph = e.phases[e.phases.length - 1];
            body += '<text class="barlabel" x="' + r1(lx) + '" y="' + (yy - 3) + '">' + esc(e.label + "  " + PHASE[ph.p] + (ph.state ? " " + ph.state : "") + (ph.timeout ? ", timeout " + ph.timeout + " s" : "")) + "</text>";
          }
          body += "</g>";
          counts.entryBars++;
        });
        laneEnd(h);
        counts.ctLanes++;
      });
    }
    if (D.agg && D.meta.aggregated_conntrack) {
      section("Conntrack entries per node (aggregated)", "area: most entries alive in each bucket");
      D.agg.conntrack.forEach(function (a) { ctAggLane(a); counts.aggLanes++; });
    }

    // Pods.
    if (D.pods.length) {
      section("Pods", D.pods_hidden ? D.pods_hidden + " pods with no change during the run are not shown" : "");
      D.pods.forEach(function (p) {
        var h = 34;
        laneStart("pod:" + p.pod, p.pod.split("/").pop(), p.pod.split("/")[0] + (p.node ? " · on " + p.node : ""), h);
        segs(p.segs, y + 8, 16, podFill, function (s) { return POD[s.state] || s.state; }, "pod", p.pod);
        p.marks.forEach(function (m) { mark(m, y + 4, "pod-change"); });
        laneEnd(h);
        counts.podLanes++;
      });
    }

    // EndpointSlices.
    if (D.services.length) {
      section("EndpointSlices", "one row per endpoint: solid ready, hatched serving but not ready, crossed not serving, dotted terminating");
      D.services.forEach(function (s) {
        var rh = 15, h = Math.max(34, s.rows.length * rh + 8);
        laneStart("endpoints:" + s.service, s.service.split("/").pop(), s.service, h);
        s.rows.forEach(function (r, i) {
          var yy = y + 4 + i * rh;
          body += '<text class="row-label halo" x="' + (LABEL_W - 6) + '" y="' + (yy + 10) + '" text-anchor="end">' + esc(fit(shortEp(r.ep), 180, 11)) + "</text>";
          segs(r.segs, yy, rh - 3, function (st) { return epsFill(st, r.ep); }, function (sg) { return r.ip + ": " + (EPS[sg.state] || sg.state); }, "eps", r.ip);
        });
        s.marks.forEach(function (m) { mark(m, y + 2, "eps-change"); });
        laneEnd(h);
        counts.epsLanes++;
      });
    }

    // kube-proxy.
    if (D.kube_proxy.length) {
      section("kube-proxy", "tall tick: full sync; short: partial sync; ⊗ cleanup deletion; ✗ sync failed");
      D.kube_proxy.forEach(function (k) {
        var h = 30;
        laneStart("kube-proxy:" + k.node, k.node, "", h);
        var lastX = -10;
        k.marks.forEach(function (m) {
          if (m.t < view.t0 || m.t > view.t1) return;
          var x = r1(X(m.t));
          var id = hit("kube-proxy " + k.node + ": " + m.kind + (m.count > 1 ? " ×" + m.count : ""), [m.line]);
          var g = "";
          if (m.kind === "full") g = '<rect x="' + (x - 1.5) + '" y="' + (y + 3) + '" width="3" height="' + (h - 6) + '" fill="var(--fg)"/>';
          else if (m.kind === "partial") g = '<rect x="' + (x - 1.5) + '" y="' + (y + h / 2) + '" width="3" height="' + (h / 2 - 3) + '" fill="var(--accent)"/>';
          else if (m.kind === "cleanup") g = cleanupGlyph(x, y + h / 2);
          else g = glyph("t", x, y + h / 2, "var(--bad)");
          if (m.kind !== "cleanup" && m.kind !== "failed" && x - lastX < 1) return;
          lastX = x;
          body += '<g class="hit kp" data-h="' + id + '" data-kind="' + m.kind + '" data-t="' + m.t + '"><rect x="' + (x - 4) + '" y="' + y + '" width="8" height="' + h + '" fill="transparent"/>' + g + "</g>";
        });
        laneEnd(h);
        counts.kpLanes++;
      });
    }

    // Scenario changes and commands typed on nodes.
    if (D.changes.length) {
      section("Changes", "Services, slices, kube-proxy and node events of the scenario; commands typed on nodes");
      var hc = 26;
      laneStart("changes", "changes", D.changes.length + " events", hc);
      D.changes.forEach(function (m) {
        if (m.t < view.t0 || m.t > view.t1) return;
        var x = r1(X(m.t)), id = hit("change", [m.line]);
        body += '<g class="hit mark" data-h="' + id + '" data-kind="change" data-t="' + m.t + '"><path d="M' + x + " " + (y + 6) + "L" + (x + 5) + " " + (y + 13) + "L" + x + " " + (y + 20) + "L" + (x - 5) + " " + (y + 13) +
          'Z" fill="var(--warn)" stroke="var(--fg)" stroke-width="1"/></g>';
      });
      laneEnd(hc);
    }

    // Expectations.
    if (D.expect_marks.length) {
      section("Expectations", "");
      var h = 28;
      laneStart("expectations", "checks", "✓ PASS  ✗ FAIL", h);
      D.expect_marks.forEach(function (m) {
        if (m.t < view.t0 || m.t > view.t1) return;
        var x = r1(Math.min(X(m.t), LABEL_W + PW - 6)), id = hit(m.kind === "pass" ? "PASS" : "FAIL", [m.line]);
        body += '<g class="hit expect" data-h="' + id + '" data-verdict="' + m.kind + '">' +
          (m.kind === "pass" ? '<path d="M' + (x - 5) + " " + (y + 14) + "L" + (x - 1) + " " + (y + 19) + "L" + (x + 6) + " " + (y + 8) + '" stroke="var(--ok)" stroke-width="2.6" fill="none"/>'
            : glyph("t", x, y + 14, "var(--bad)")) + '<rect x="' + (x - 6) + '" y="' + (y + 4) + '" width="12" height="20" fill="transparent"/></g>';
      });
      laneEnd(h);
    }

    var total = y + 8;
    // Axis and guides on top.
    var axis = "", step = tickStep(view.t1 - view.t0), first = Math.ceil(view.t0 / step) * step;
    for (var t = first; t <= view.t1; t += step) {
      var x = r1(X(t));
      axis += '<g class="tick"><line x1="' + x + '" x2="' + x + '" y1="' + (AXIS_H - 6) + '" y2="' + total + '"/><text x="' + x + '" y="' + (AXIS_H - 10) + '" text-anchor="' + (x > LABEL_W + PW - 40 ? "end" : x < LABEL_W + 40 ? "start" : "middle") + '">' + hms(t, step < 1e9) + "</text></g>";
    }
    axis += '<line class="axis-line" x1="' + LABEL_W + '" x2="' + (LABEL_W + PW) + '" y1="' + (AXIS_H - 6) + '" y2="' + (AXIS_H - 6) + '"/>';
    var guides = "";
    D.guides.forEach(function (g, i) {
      if (g.t < view.t0 || g.t > view.t1) return;
      var x = r1(X(g.t));
      guides += '<line class="guide" data-t="' + g.t + '" x1="' + x + '" x2="' + x + '" y1="' + (AXIS_H - 24) + '" y2="' + total + '"/>' +
        '<text class="guide-label" x="' + (x + 4) + '" y="' + (AXIS_H - 26 + (i % 2) * 0) + '">' + esc(g.label + " " + hms(g.t)) + "</text>";
    });
    var svg = document.getElementById("chart");
    svg.setAttribute("viewBox", "0 0 " + W + " " + total);
    svg.setAttribute("height", total);
    svg.innerHTML = "<defs>" + patternDefs() + '<clipPath id="plot"><rect x="' + LABEL_W + '" y="0" width="' + PW + '" height="' + total + '"/></clipPath></defs>' +
      axis + body + guides;
    document.getElementById("window").textContent = hms(view.t0) + " – " + hms(view.t1) + "  (" + dur(view.t1 - view.t0) + ")";
    drawOverview();
    var more = document.getElementById("more-services");
    if (D.agg && D.meta.aggregated_clients && D.agg.services.length > 30 && !more) {
      var b = document.createElement("button");
      b.id = "more-services"; b.type = "button"; b.textContent = "show all " + D.agg.services.length + " Services";
      b.addEventListener("click", function () { showAllServices = !showAllServices; b.textContent = showAllServices ? "show 30 Services" : "show all " + D.agg.services.length + " Services"; draw(); });
      document.getElementById("legend").prepend(b);
    }
    return counts;

    function segs(list, yy, hh, fill, label, kind, key) {
      list.forEach(function (s) {
        if (!visible(s.t0, s.t1) || s.t1 <= s.t0) return;
        var a = clampX(X(s.t0)), b = clampX(X(s.t1)), f = fill(s.state);
        var id = hit(label(s) + " from " + hms(s.t0) + " to " + hms(s.t1), []);
        if (f.none) {
          body += '<line x1="' + r1(a) + '" x2="' + r1(b) + '" y1="' + (yy + hh / 2) + '" y2="' + (yy + hh / 2) + '" stroke="var(--muted)" stroke-dasharray="2 4"/>';
          return;
        }
        body += '<g class="hit seg" data-h="' + id + '" data-kind="' + kind + '" data-key="' + esc(key) + '" data-state="' + s.state + '" data-t0="' + s.t0 + '" data-t1="' + s.t1 + '">' +
          '<rect x="' + r1(a) + '" y="' + yy + '" width="' + r1(Math.max(1, b - a)) + '" height="' + hh + '" fill="' + f.fill + '"' + (f.op ? ' fill-opacity="' + f.op + '"' : "") + ' stroke="' + f.stroke + '" stroke-width="1"/>';
        if (b - a > 70 && kind === "pod") body += '<text class="barlabel halo" x="' + r1(a + 4) + '" y="' + (yy + hh - 4) + '">' + esc(POD[s.state] || s.state) + "</text>";
        body += "</g>";
      });
    }
    function mark(m, yy, kind) {
      if (m.t < view.t0 || m.t > view.t1) return;
      var x = r1(X(m.t)), id = hit(kind === "pod-change" ? "pod change" : "EndpointSlice change", [m.line]);
      var big = m.kind === "major";
      body += '<g class="hit mark" data-h="' + id + '" data-kind="' + kind + '" data-t="' + m.t + '"><path d="M' + x + " " + (yy - 4) + "L" + (x + 4) + " " + yy + "L" + x + " " + (yy + 4) + "L" + (x - 4) + " " + yy +
        'Z" fill="' + (big ? "var(--bad)" : "var(--fg)") + '" stroke="var(--bg)" stroke-width="1"/><rect x="' + (x - 5) + '" y="' + (yy - 5) + '" width="10" height="10" fill="transparent"/></g>';
    }
    function podFill(st) {
      switch (st) {
        case "ready": return { fill: "var(--ok)", stroke: "var(--ok)", op: ".85" };
        case "notready": return { fill: "url(#hatch-ok)", stroke: "var(--ok)" };
        case "killed-ready": return { fill: "url(#hatch-bad)", stroke: "var(--bad)" };
        case "killed": return { fill: "url(#cross-bad)", stroke: "var(--bad)" };
        case "terminating": return { fill: "url(#dots-fg)", stroke: "var(--fg)" };
        default: return { none: true };
      }
    }
    function epsFill(st, ep) {
      switch (st) {
        case "ready": return { fill: colour(ep), stroke: colour(ep) };
        case "serving": return { fill: "url(#hatch-" + ep + ")", stroke: colour(ep) };
        case "notserving": return { fill: "url(#cross-muted)", stroke: "var(--muted)" };
        case "terminating": return { fill: "url(#dots-fg)", stroke: "var(--fg)" };
        default: return { none: true };
      }
    }
    function columns(buckets, bucketNs, ncols) {
      // Re-bin the buckets into screen columns of at least 3 px.
      var cols = {}, colNs = Math.max(bucketNs, (view.t1 - view.t0) / Math.max(1, PW / 3));
      colNs = Math.ceil(colNs / bucketNs) * bucketNs;
      buckets.forEach(function (b) {
        var t = b[0] * bucketNs;
        if (t + bucketNs < view.t0 || t > view.t1) return;
        var k = Math.floor(t / colNs), c = cols[k];
        if (!c) c = cols[k] = [0, 0, 0, 0, 0, 0];
        for (var i = 1; i < ncols; i++) c[i] += b[i];
        if (!c[5] && b[5]) c[5] = b[5];
        c.n = (c.n || 0) + 1;
      });
      return { cols: cols, colNs: colNs };
    }
    function aggLane(id, label, a) {
      var h = 34;
      var tot = a.total[0] + a.total[1] + a.total[2] + a.total[3];
      laneStart(id, label, tot + " queries, " + (a.total[1] + a.total[2] + a.total[3]) + " failed", h);
      var cc = columns(a.buckets, D.agg.bucket_ns, 5), max = 1, k;
      for (k in cc.cols) { var c = cc.cols[k]; max = Math.max(max, c[1] + c[2] + c[3] + c[4]); }
      for (k in cc.cols) {
        var c2 = cc.cols[k], t0 = k * cc.colNs, x0 = clampX(X(t0)), x1 = clampX(X(t0 + cc.colNs)), w = Math.max(1, x1 - x0 - 0.5);
        var yb = y + h - 2, parts = [[c2[1], "var(--ok)"], [c2[2], "url(#hatch-bad)"], [c2[3], "url(#cross-bad)"], [c2[4], "url(#dots-fg)"]];
        var idh = hit(label + " " + hms(t0) + " – " + hms(t0 + cc.colNs) + ": answered " + c2[1] + ", timed out " + c2[2] + ", refused " + c2[3] + ", failed " + c2[4], c2[5] ? [c2[5] - 1] : []);
        body += '<g class="hit agg" data-h="' + idh + '">';
        parts.forEach(function (p) {
          if (!p[0]) return;
          var hh = Math.max(1, p[0] / max * (h - 6));
          yb -= hh;
          body += '<rect x="' + r1(x0) + '" y="' + r1(yb) + '" width="' + r1(w) + '" height="' + r1(hh) + '" fill="' + p[1] + '"' + (p[1].indexOf("url") === 0 ? ' stroke="var(--bad)" stroke-width=".6"' : "") + "/>";
        });
        body += "</g>";
      }
      body += '<text class="lane-sub" x="' + (LABEL_W + PW - 4) + '" y="' + (y + 11) + '" text-anchor="end">max ' + max + " per " + dur(cc.colNs) + "</text>";
      laneEnd(h);
    }
    function ctAggLane(a) {
      var h = 34;
      laneStart("conntrack-agg:" + a.name, a.name, a.total[0] + " entries created", h);
      var cc = columns(a.buckets, D.agg.bucket_ns, 5), max = 1, k, pts = [];
      // Column value: most alive (index 4 holds the bucket max; summed columns take the max instead).
      var best = {};
      a.buckets.forEach(function (b) {
        var t = b[0] * D.agg.bucket_ns;
        if (t + D.agg.bucket_ns < view.t0 || t > view.t1) return;
        var kk = Math.floor(t / cc.colNs);
        best[kk] = Math.max(best[kk] || 0, b[4], b[3]);
      });
      for (k in best) max = Math.max(max, best[k]);
      var keys = Object.keys(best).map(Number).sort(function (p, q) { return p - q; });
      keys.forEach(function (kk) {
        var x0 = clampX(X(kk * cc.colNs)), x1 = clampX(X((kk + 1) * cc.colNs)), yy = y + h - 2 - best[kk] / max * (h - 6);
        pts.push(r1(x0) + "," + r1(yy), r1(x1) + "," + r1(yy));
        var idh = hit(a.name + " " + hms(kk * cc.colNs) + ": up to " + best[kk] + " entries alive", []);
        body += '<rect class="hit agg" data-h="' + idh + '" x="' + r1(x0) + '" y="' + y + '" width="' + r1(Math.max(1, x1 - x0)) + '" height="' + h + '" fill="transparent"/>';
      });
      if (pts.length) body += '<polyline points="' + pts.join(" ") + '" fill="none" stroke="var(--accent)" stroke-width="1.6"/>';
      body += '<text class="lane-sub" x="' + (LABEL_W + PW - 4) + '" y="' + (y + 11) + '" text-anchor="end">max ' + max + " alive</text>";
      laneEnd(h);
    }
  }

  function drawOverview() {
    var svg = document.getElementById("overview"), w = svg.clientWidth || W, h = 34;
    var pw = w - LABEL_W - PAD_R;
    function ox(t) { return LABEL_W + t / END * pw; }
    var s = '<rect class="ovl-bg" x="' + LABEL_W + '" y="4" width="' + pw + '" height="' + (h - 8) + '"/>';
    s += '<text class="lane-sub" x="4" y="21">whole run ' + hms(0, false) + "–" + hms(END, false) + "</text>";
    D.guides.forEach(function (g) { var x = r1(ox(g.t)); s += '<line x1="' + x + '" x2="' + x + '" y1="4" y2="' + (h - 4) + '" stroke="var(--bad)" stroke-width="2"/>'; });
    D.expect_marks.forEach(function (m) {
      if (m.kind === "fail") { var x = r1(ox(m.t)); s += glyph("t", x, h / 2, "var(--bad)"); }
    });
    var a = ox(view.t0), b = ox(view.t1);
    s += '<rect class="ovl-win" x="' + r1(a) + '" y="2" width="' + r1(Math.max(3, b - a)) + '" height="' + (h - 4) + '"/>';
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.innerHTML = s;
    svg.onclick = function (e) {
      var r = svg.getBoundingClientRect(), x = (e.clientX - r.left) * (w / r.width);
      var t = (x - LABEL_W) / pw * END, half = (view.t1 - view.t0) / 2;
      zoomTo(t - half, t + half);
    };
  }

  // ---------- interaction ----------
  function zoomTo(a, b, keepHash) {
    var span = Math.max(MIN_WINDOW, Math.min(END, b - a));
    if (a < 0) a = 0;
    if (a + span > END) a = END - span;
    view.t0 = Math.max(0, Math.round(a)); view.t1 = Math.round(view.t0 + span);
    draw();
    if (!keepHash && history.replaceState) {
      var h = view.t0 === 0 && view.t1 === END ? " " : "#from=" + hms(view.t0) + "&to=" + hms(view.t1);
      try { history.replaceState(null, "", h === " " ? location.pathname + location.search : h); } catch (err) { /* file: URLs may refuse */ }
    }
  }
  // #from=00:04:50&to=00:05:40 (or nanoseconds) opens the report on that window.
  function viewFromHash() {
    var m = /from=([^&]+)&to=([^&]+)/.exec(location.hash || "");
    if (!m) return false;
    function v(s) { s = decodeURIComponent(s); return /^\d+$/.test(s) ? +s : parseHms(s.indexOf(".") < 0 ? s + ".000" : s); }
    var a = v(m[1]), b = v(m[2]);
    if (a === null || b === null || !(b > a)) return false;
    view.t0 = Math.max(0, a); view.t1 = Math.min(END, b);
    if (view.t1 - view.t0 < MIN_WINDOW) view.t1 = Math.min(END, view.t0 + MIN_WINDOW);
    return true;
  }
  function zoomAround(t, factor) {
    var span = (view.t1 - view.t0) * factor, f = (t - view.t0) / (view.t1 - view.t0);
    zoomTo(t - span * f, t - span * f + span);
  }
  function centre() { return (view.t0 + view.t1) / 2; }
  function timeAt(clientX) {
    var svg = document.getElementById("chart"), r = svg.getBoundingClientRect();
    var x = (clientX - r.left) * (W / r.width);
    return view.t0 + (x - LABEL_W) / PW * (view.t1 - view.t0);
  }
  document.getElementById("controls").addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("button");
    if (!b) return;
    var z = b.getAttribute("data-zoom"), c = centre(), span = view.t1 - view.t0;
    if (z === "all") zoomTo(0, END);
    else if (z === "in") zoomAround(c, 0.5);
    else if (z === "out") zoomAround(c, 2);
    else if (z === "left") zoomTo(view.t0 - span / 3, view.t1 - span / 3);
    else if (z === "right") zoomTo(view.t0 + span / 3, view.t1 + span / 3);
    else { var s = +z * 1e9; zoomTo(c - s / 2, c + s / 2); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.target && /INPUT|TEXTAREA/.test(e.target.tagName)) return;
    var span = view.t1 - view.t0;
    if (e.key === "+" || e.key === "=") zoomAround(centre(), 0.5);
    else if (e.key === "-") zoomAround(centre(), 2);
    else if (e.key === "Home") zoomTo(0, END);
    else if (e.key === "ArrowLeft") zoomTo(view.t0 - span / 4, view.t1 - span / 4);
    else if (e.key === "ArrowRight") zoomTo(view.t0 + span / 4, view.t1 + span / 4);
    else if (e.key === "Escape") closeDetails();
    else return;
    e.preventDefault();
  });
  var chart = document.getElementById("chart");
  chart.addEventListener("wheel", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) {
      e.preventDefault();
      zoomAround(timeAt(e.clientX), e.deltaY < 0 ? 0.8 : 1.25);
    } else if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      e.preventDefault();
      var span = view.t1 - view.t0;
      zoomTo(view.t0 + e.deltaX / PW * span, view.t1 + e.deltaX / PW * span);
    }
  }, { passive: false });
  chart.addEventListener("dblclick", function (e) { zoomAround(timeAt(e.clientX), 0.25); });
  var drag = null;
  chart.addEventListener("mousedown", function (e) {
    if (e.button !== 0) return;
    drag = { x: e.clientX, t0: view.t0, t1: view.t1, shift: e.shiftKey, moved: false };
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var dx = e.clientX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved || drag.shift) return;
    chart.classList.add("dragging");
    var r = chart.getBoundingClientRect(), dt = -dx * (W / r.width) / PW * (drag.t1 - drag.t0);
    zoomTo(drag.t0 + dt, drag.t1 + dt);
  });
  window.addEventListener("mouseup", function (e) {
    if (drag && drag.shift && drag.moved) {
      var a = timeAt(drag.x), b = timeAt(e.clientX);
      zoomTo(Math.min(a, b), Math.max(a, b));
    }
    if (drag && drag.moved) chart.setAttribute("data-dragged", "1");
    drag = null;
    chart.classList.remove("dragging");
  });

  var tip = document.getElementById("tip");
  function hitHtml(h) {
    return "<b>" + esc(h.title) + "</b>" + (h.lines.length ? "<pre>" + h.lines.map(function (i) { return esc(D.lines[i]); }).join("\n") + "</pre>" : "");
  }
  chart.addEventListener("mousemove", function (e) {
    var g = e.target.closest && e.target.closest("[data-h]");
    if (!g || drag) { tip.hidden = true; return; }
    tip.innerHTML = hitHtml(hits[+g.getAttribute("data-h")]);
    tip.hidden = false;
    var x = e.clientX + 14, y = e.clientY + 14, r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 8) x = Math.max(8, e.clientX - r.width - 14);
    if (y + r.height > window.innerHeight - 8) y = Math.max(8, e.clientY - r.height - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  });
  chart.addEventListener("mouseleave", function () { tip.hidden = true; });
  chart.addEventListener("click", function (e) {
    if (chart.getAttribute("data-dragged")) { chart.removeAttribute("data-dragged"); return; }
    var g = e.target.closest && e.target.closest("[data-h]");
    if (!g) return;
    document.getElementById("details-body").innerHTML = hitHtml(hits[+g.getAttribute("data-h")]);
    document.getElementById("details").hidden = false;
  });
  function closeDetails() { document.getElementById("details").hidden = true; }
  document.getElementById("details-close").addEventListener("click", closeDetails);
  window.addEventListener("resize", function () { draw(); });

  // ---------- go ----------
  header();
  legend();
  tables();
  viewFromHash();
  var counts = draw();
  status.setAttribute("data-state", "ok");
  Object.keys(counts).forEach(function (k) { status.setAttribute("data-" + k.replace(/[A-Z]/g, function (c) { return "-" + c.toLowerCase(); }), counts[k]); });
  status.textContent = "rendered " + counts.clientLanes + " client lanes, " + counts.entryBars + " conntrack entries, " + counts.podLanes + " pods, " +
    D.expectations.length + " expectations";
})();
