/* stallscope report: sorting and filtering of every table, the charts (uPlot), the flame graph, and
   the window: a range selected on a chart recomputes the tables from each row's per-interval parts
   (percentiles from summed histograms). Data comes only from the JSON element, read as text; the
   page is changed only through textContent, classes and createElement. */
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("stallscope-data").textContent);
  var api = window.__stallscope = {data: data, errors: []};

  // ---- number formats: the same rules as reports/format.py ---------------------------------------
  var fmt = {
    ns: function (ns) {  // analyzer/units.py fmt_ns: each unit while its figure, as rounded, stays under 1000
      if (ns === null || ns === undefined) return "-";
      if (Math.round(ns) < 1e3) return ns.toFixed(0) + "ns";
      if (Number((ns / 1e3).toFixed(1)) < 1e3) return (ns / 1e3).toFixed(1) + "us";
      if (Number((ns / 1e6).toFixed(2)) < 1e3) return (ns / 1e6).toFixed(2) + "ms";
      if (Number((ns / 1e9).toFixed(2)) < 1e3) return (ns / 1e9).toFixed(2) + "s";
      return fmt.count(ns / 1e9) + "s";
    },
    count: function (n) {
      if (n === null || n === undefined) return "-";
      return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    },
    pct: function (p) { return p === null || p === undefined ? "-" : p.toFixed(1) + "%"; },
    bytes: function (n) {
      var units = ["B", "K", "M", "G"];
      for (var i = 0; i < units.length; i++) {
        if (n < 1024 || i === units.length - 1) return i === 0 ? n.toFixed(0) + "B" : n.toFixed(1) + units[i];
        n /= 1024;
      }
    },
    rate: function (r) { return r >= 100 ? fmt.count(r) + "/s" : Number(r.toPrecision(3)) + "/s"; },
    tasks: function (n) { return n === null || n === undefined ? "-" : n.toFixed(2); }  // tasks on average
  };
  fmt.ns_per_s = function (v) { return fmt.ns(v) + "/s"; };
  api.fmt = fmt;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- tables: sort by a header, filter by text ---------------------------------------------------
  function cellValue(td, type) {
    if (!td) return type === "num" ? -Infinity : "";
    if (type === "num") {
      var raw = td.getAttribute("data-v");
      return raw === null || raw === "" ? -Infinity : Number(raw);
    }
    var v = td.getAttribute("data-v");
    return (v !== null ? v : td.textContent).trim().toLowerCase();
  }

  function sortTable(table, col, dir) {
    var th = table.tHead.rows[0].cells[col], type = th.getAttribute("data-type") || "text";
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {  // a row's group (data-group) keeps its place whatever the column
      var ga = Number(a.getAttribute("data-group") || 0), gb = Number(b.getAttribute("data-group") || 0);
      if (ga !== gb) return ga - gb;
      var x = cellValue(a.cells[col], type), y = cellValue(b.cells[col], type);
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
    for (var i = 0; i < rows.length; i++) body.appendChild(rows[i]);
    var ths = table.tHead.rows[0].cells;
    for (var j = 0; j < ths.length; j++) ths[j].setAttribute("aria-sort", j === col ? (dir > 0 ? "ascending" : "descending") : "none");
    table.__sort = [col, dir];
  }

  function filterTable(table, text) {
    var q = text.trim().toLowerCase(), body = table.tBodies[0], shown = 0;
    for (var i = 0; i < body.rows.length; i++) {
      var row = body.rows[i], hit = !q || row.textContent.toLowerCase().indexOf(q) >= 0;
      row.classList.toggle("hidden", !hit);
      if (hit && !row.classList.contains("empty-window")) shown++;
    }
    var note = document.querySelector('.shown[data-table="' + table.id + '"]');
    if (note) note.textContent = q ? shown + " of " + body.rows.length + " rows" : "";
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (table) {
    var ths = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(ths, function (th, col) {
      var b = th.querySelector("button.sort");
      if (!b) return;
      b.addEventListener("click", function () {
        var cur = table.__sort, type = th.getAttribute("data-type");
        var dir = cur && cur[0] === col ? -cur[1] : (type === "num" ? -1 : 1);
        sortTable(table, col, dir);
      });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll("input.filter"), function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () { filterTable(table, input.value); });
  });
  api.sortTable = sortTable;
  api.filterTable = filterTable;

  function drawBars() {
    var bars = document.querySelectorAll("span.bar[data-bar]"), peak = 0, i;
    for (i = 0; i < bars.length; i++) peak = Math.max(peak, Number(bars[i].getAttribute("data-bar")));
    for (i = 0; i < bars.length; i++) bars[i].style.width = (peak ? 100 * Number(bars[i].getAttribute("data-bar")) / peak : 0) + "%";
  }
  drawBars();

  // ---- flame graph -----------------------------------------------------------------------------------
  var canvas = document.getElementById("flame-canvas");
  if (canvas && data.flame) {
    var matchEl = document.getElementById("flame-match");
    var fg = new window.StallscopeFlameGraph(canvas, document.getElementById("flame-tip"), {
      format: fmt,
      onMatch: function (g) {
        if (!matchEl) return;
        matchEl.textContent = g ? "matched " + (100 * g.matchShare).toFixed(2) + "% (" + fmt.ns(g.matchValue * g.tree.unit_ns) + ")" : "";
      }
    });
    api.flame = fg;
    var idle = document.getElementById("flame-idle");
    var which = data.kind === "diff" ? "diff" : "offcpu";
    var modes = {
      offcpu: function () { return {keys: idle && idle.checked ? ["blocker", "cpu", "idle"] : ["blocker", "cpu"], colour: "class"}; },
      oncpu: function () { return {keys: ["oncpu"], colour: "name"}; },
      diff: function () {
        var w = document.querySelector("button[data-width].on");
        return {keys: [w ? w.getAttribute("data-width") : "new"], colour: "diff", base: "base", next: "new",
                baseLabel: "base", nextLabel: "new"};
      }
    };
    var show = function (name) {
      which = name;
      fg.setTree(data.flame[name], modes[name]());
      if (idle) idle.disabled = name !== "offcpu";
      Array.prototype.forEach.call(document.querySelectorAll("button[data-flame]"), function (b) {
        b.classList.toggle("on", b.getAttribute("data-flame") === name);
      });
    };
    show(which);
    Array.prototype.forEach.call(document.querySelectorAll("button[data-flame]"), function (b) {
      b.addEventListener("click", function () { if (!b.disabled && data.flame[b.getAttribute("data-flame")]) show(b.getAttribute("data-flame")); });
    });
    Array.prototype.forEach.call(document.querySelectorAll("button[data-width]"), function (b) {
      b.addEventListener("click", function () {
        Array.prototype.forEach.call(document.querySelectorAll("button[data-width]"), function (o) { o.classList.toggle("on", o === b); });
        fg.setKeys([b.getAttribute("data-width")]);
      });
    });
    if (idle) idle.addEventListener("change", function () { fg.setKeys(modes.offcpu().keys); fg._colours(); fg.draw(); });
    var search = document.getElementById("flame-search");
    if (search) search.addEventListener("input", function () { fg.search(search.value); });
    var reset = document.getElementById("flame-reset");
    if (reset) reset.addEventListener("click", function () { if (search) search.value = ""; fg.query = ""; fg.reset(); });
  }

  // ---- the window: tables recomputed from per-interval parts ---------------------------------------
  var series = data.series;

  function range(sp, a, b) {  // [first, last) positions of intervals a..b in a sparse row's sorted "i"
    var idx = sp.i, lo = 0, hi = idx.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (idx[m] < a) lo = m + 1; else hi = m; }
    var s = lo;
    hi = idx.length;
    while (lo < hi) { var m2 = (lo + hi) >> 1; if (idx[m2] <= b) lo = m2 + 1; else hi = m2; }
    return [s, lo];
  }

  function sumRow(sp, a, b, width) {
    var out = new Array(width).fill(0);
    if (!sp) return out;
    var r = range(sp, a, b);
    for (var k = r[0]; k < r[1]; k++) for (var j = 0; j < width; j++) out[j] += sp.v[k][j];
    return out;
  }

  function percentile(hist, longest, q) {  // as analyzer/blockers.percentiles, clamped only when it can be
    var slots = Object.keys(hist).map(Number).sort(function (x, y) { return x - y; }), total = 0, seen = 0, i;
    for (i = 0; i < slots.length; i++) total += hist[slots[i]];
    if (!total) return null;
    for (i = 0; i < slots.length; i++) {
      seen += hist[slots[i]];
      if (seen >= q * total - 1e-9) {
        var bound = Math.pow(2, slots[i] + 1);
        return longest >= Math.pow(2, slots[i]) ? Math.min(bound, longest) : bound;
      }
    }
    return null;
  }

  var original = new Map();  // cell -> [text, data-v, class list] of the whole recording

  function setCell(td, value, format) {
    if (!original.has(td)) original.set(td, [td.textContent, td.getAttribute("data-v")]);
    td.textContent = value === null || value === undefined ? "-" : fmt[format] ? fmt[format](value) : String(value);
    td.setAttribute("data-v", value === null || value === undefined ? "" : String(value));
  }

  function restore() {
    original.forEach(function (v, td) { td.textContent = v[0]; if (v[1] === null) td.removeAttribute("data-v"); else td.setAttribute("data-v", v[1]); });
    original.clear();
    Array.prototype.forEach.call(document.querySelectorAll(".empty-window"), function (r) { r.classList.remove("empty-window"); });
    Array.prototype.forEach.call(document.querySelectorAll("td.stale"), function (c) { c.classList.remove("stale"); });
    Array.prototype.forEach.call(document.querySelectorAll("td[data-causes-orig]"), function (c) { c.removeAttribute("data-causes-orig"); });
    causeCells.forEach(function (kids, td) { while (td.firstChild) td.removeChild(td.firstChild); kids.forEach(function (k) { td.appendChild(k); }); });
    causeCells.clear();
  }
  var causeCells = new Map();

  function rowsOf(id) {
    var t = document.getElementById(id);
    return t ? Array.prototype.slice.call(t.tBodies[0].rows) : [];
  }

  function markStale(tr) {
    Array.prototype.forEach.call(tr.cells, function (td) {
      if (td.classList.contains("n") && !td.hasAttribute("data-w")) td.classList.add("stale");
    });
  }

  function windowTables(a, b, first, last) {  // spans a..b: intervals first..last
    var W = series.window, secs = 0, i;
    for (i = first; i <= last; i++) secs += series.duration_s[i];
    // blockers
    var brow = rowsOf("t-blockers"), sums = [], denom = 0;
    brow.forEach(function (tr) {
      var k = Number(tr.getAttribute("data-i")), sp = W.causes[k], ns = 0, n = 0, mx = 0, hist = {};
      if (sp) {
        var r = range(sp, a, b);
        for (var j = r[0]; j < r[1]; j++) {
          ns += sp.ns[j]; n += sp.n[j]; mx = Math.max(mx, sp.max[j]);
          var h = sp.h[j];
          for (var x = 0; x < h.length; x += 2) hist[h[x]] = (hist[h[x]] || 0) + h[x + 1];
        }
      }
      sums.push([tr, ns, n, mx, hist]);
      if (tr.getAttribute("data-class") !== "idle") denom += ns;
    });
    sums.forEach(function (s) {
      var tr = s[0], cells = tr.querySelectorAll("td[data-w]"), vals = {
        ns: s[1], per_s: secs ? s[1] / secs : 0, n: s[2], max: s[3] || null,
        share: tr.getAttribute("data-class") === "idle" ? null : (denom ? 100 * s[1] / denom : 0),
        p50: percentile(s[4], s[3], 0.5), p90: percentile(s[4], s[3], 0.9), p99: percentile(s[4], s[3], 0.99)
      };
      Array.prototype.forEach.call(cells, function (td) { setCell(td, vals[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      tr.classList.toggle("empty-window", !s[1] && !s[2]);
      markStale(tr);
    });
    // processes
    rowsOf("t-processes").forEach(function (tr) {
      var parts = W.processes[Number(tr.getAttribute("data-i"))] || {}, v = {waiting: 0, blocked: 0, runq: 0, idle: 0}, top = [];
      Object.keys(parts).forEach(function (ci) {
        var ns = sumRow(parts[ci], a, b, 1)[0], cls = W.cause_classes[Number(ci)];
        if (!ns) return;
        if (cls === "idle") v.idle += ns; else { v.waiting += ns; top.push([W.cause_names[Number(ci)], ns]); }
        if (cls === "blocker") v.blocked += ns;
        if (cls === "cpu") v.runq += ns;
      });
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) {
        var w = td.getAttribute("data-w");
        if (w === "causes") {
          if (!causeCells.has(td)) causeCells.set(td, Array.prototype.slice.call(td.childNodes));
          while (td.firstChild) td.removeChild(td.firstChild);
          top.sort(function (x, y) { return y[1] - x[1]; }).slice(0, 3).forEach(function (c) { td.appendChild(el("span", "c", c[0] + " " + fmt.ns(c[1]))); });
        } else setCell(td, v[w], td.getAttribute("data-f"));
      });
      tr.classList.toggle("empty-window", !v.waiting && !v.idle);
      markStale(tr);
    });
    // threads: [offcpu, runq, vol, invol, migr]
    rowsOf("t-threads").forEach(function (tr) {
      var s = sumRow(W.threads[Number(tr.getAttribute("data-i"))], a, b, 5);
      var v = {offcpu: s[0], runq: s[1], vol: s[2], invol: s[3], migr: s[4]};
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) { setCell(td, v[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      tr.classList.toggle("empty-window", !s[0] && !s[1] && !s[2] && !s[3]);
      markStale(tr);
    });
    // locks: [contentions, ns]
    rowsOf("t-locks").forEach(function (tr) {
      var s = sumRow(W.locks[Number(tr.getAttribute("data-i"))], a, b, 2), v = {n: s[0], ns: s[1], avg: s[0] ? s[1] / s[0] : 0};
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) { setCell(td, v[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      tr.classList.toggle("empty-window", !s[0]);
      markStale(tr);
    });
    // slab: [allocs, frees, bytes, list_lock contentions, list_lock ns]
    rowsOf("t-slab").forEach(function (tr) {
      var s = sumRow(W.slab[Number(tr.getAttribute("data-i"))], a, b, 5), v = {allocs: s[0], frees: s[1], bytes: s[2], lockn: s[3], lockns: s[4]};
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) { setCell(td, v[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      tr.classList.toggle("empty-window", !s[0] && !s[1] && !s[3]);
      markStale(tr);
    });
    // on-CPU functions: [self, inclusive]
    var samples = 0;
    for (i = a; i <= b; i++) samples += W.oncpu_samples[i] || 0;
    rowsOf("t-functions").forEach(function (tr) {
      var s = sumRow(W.functions[Number(tr.getAttribute("data-i"))], a, b, 2), v = {self: s[0], incl: s[1], selfpct: samples ? 100 * s[0] / samples : 0};
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) { setCell(td, v[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      tr.classList.toggle("empty-window", !s[1]);
    });
    // run-queue histogram
    var hist = {}, total = 0, r = range(W.runq, a, b);
    for (var k = r[0]; k < r[1]; k++) {
      var h = W.runq.h[k];
      for (var x = 0; x < h.length; x += 2) { hist[h[x]] = (hist[h[x]] || 0) + h[x + 1]; total += h[x + 1]; }
    }
    var cum = 0;
    rowsOf("t-runq").forEach(function (tr) {
      var c = hist[Number(tr.getAttribute("data-slot"))] || 0;
      cum += c;
      var v = {n: c, pct: total ? 100 * c / total : 0, cum: total ? 100 * cum / total : 0};
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) { setCell(td, v[td.getAttribute("data-w")], td.getAttribute("data-f")); });
      var bar = tr.querySelector("span.bar");
      if (bar) { if (!original.has(bar)) original.set(bar, [bar.textContent, bar.getAttribute("data-bar")]); bar.setAttribute("data-bar", v.pct.toFixed(2)); }
    });
    drawBars();
    // each CPU's run queue: [busy ns, total ns, run-queue wait ns, waits]; busy from /proc/stat only, else the
    // whole recording's stays, dimmed
    rowsOf("t-cpus").forEach(function (tr) {
      var s = sumRow(W.cpus && W.cpus[Number(tr.getAttribute("data-i"))], a, b, 4);
      var v = {waiting: secs ? s[2] / 1e9 / secs : 0, n: s[3], avg: s[3] ? s[2] / s[3] : null};
      if (s[1]) v.busy = 100 * s[0] / s[1];
      Array.prototype.forEach.call(tr.querySelectorAll("td[data-w]"), function (td) {
        var w = td.getAttribute("data-w");
        if (w in v) setCell(td, v[w], td.getAttribute("data-f")); else td.classList.add("stale");
      });
    });
    // migration matrix
    var mr = range(W.matrix, a, b), cells = {}, peak = 0, rowSum = {};
    for (k = mr[0]; k < mr[1]; k++) {
      var m = W.matrix.m[k];
      for (x = 0; x < m.length; x += 3) { var key = m[x] + ":" + m[x + 1]; cells[key] = (cells[key] || 0) + m[x + 2]; }
    }
    Object.keys(cells).forEach(function (key) { peak = Math.max(peak, cells[key]); var s = key.split(":")[0]; rowSum[s] = (rowSum[s] || 0) + cells[key]; });
    Array.prototype.forEach.call(document.querySelectorAll("#t-matrix td[data-src]"), function (td) {
      var v = cells[td.getAttribute("data-src") + ":" + td.getAttribute("data-dst")] || 0;
      setCell(td, v, "count");
      td.className = "h" + (v && peak ? Math.max(1, Math.min(8, Math.round(8 * v / peak))) : 0);
    });
    Array.prototype.forEach.call(document.querySelectorAll("#t-matrix td[data-row]"), function (td) { setCell(td, rowSum[td.getAttribute("data-row")] || 0, "count"); });
    // keep each table's order
    Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (t) { if (t.__sort) sortTable(t, t.__sort[0], t.__sort[1]); });
  }

  var bar = document.getElementById("window-bar"), barText = document.getElementById("window-text");
  var matrixClasses = new Map();
  function setWindow(a, b) {  // intervals a..b, widened to whole spans (series.window.span intervals each)
    if (!series) return;
    var n = series.start_s.length, k = series.window.span, sa = -1, sb = -1;
    a = Math.max(0, Math.min(a, n - 1)); b = Math.max(a, Math.min(b, n - 1));
    for (var j = 0; j < series.window.spans; j++) {  // the spans whose middle interval is selected
      var mid = Math.min(j * k + Math.floor((k - 1) / 2), n - 1);
      if (mid >= a && mid <= b) { if (sa < 0) sa = j; sb = j; }
    }
    if (sa < 0) sa = sb = Math.floor(Math.floor((a + b) / 2) / k);
    var first = sa * k, last = Math.min(n - 1, (sb + 1) * k - 1);
    if (first === 0 && last === n - 1) { clearWindow(); return; }
    Array.prototype.forEach.call(document.querySelectorAll("#t-matrix td[data-src]"), function (td) { if (!matrixClasses.has(td)) matrixClasses.set(td, td.className); });
    restore();
    windowTables(sa, sb, first, last);
    var end = series.start_s[last] + series.duration_s[last];
    barText.textContent = "Tables show " + series.start_s[first].toFixed(1) + " s to " + end.toFixed(1) + " s of the recording (" +
      (last - first + 1) + " interval" + (last > first ? "s" : "") + "); dimmed numbers are of the whole recording.";
    bar.hidden = false;
    api.window = [first, last];
    api.spans = [sa, sb];
  }
  function clearWindow() {
    restore();
    matrixClasses.forEach(function (c, td) { td.className = c; });
    drawBars();
    Array.prototype.forEach.call(document.querySelectorAll("table.data"), function (t) { if (t.__sort) sortTable(t, t.__sort[0], t.__sort[1]); });
    if (bar) bar.hidden = true;
    api.window = null;
    api.spans = null;
    charts.forEach(function (u) { u.setSelect({left: 0, top: 0, width: 0, height: 0}, false); });
  }
  api.setWindow = setWindow;
  api.clearWindow = clearWindow;
  var resetBtn = document.getElementById("window-reset");
  if (resetBtn) resetBtn.addEventListener("click", clearWindow);

  // ---- charts ---------------------------------------------------------------------------------------
  var charts = [];
  api.charts = charts;
  var PALETTE = ["#d9534f", "#e0a31a", "#2458b3", "#2e7d32", "#8e24aa", "#00838f", "#6d4c41", "#c2185b"];

  function intervalsIn(x0, x1) {  // the intervals whose middle falls in [x0, x1]
    var s = series.start_s, d = series.duration_s, a = -1, b = -1;
    for (var i = 0; i < s.length; i++) {
      var mid = s[i] + d[i] / 2;
      if (mid >= x0 && mid <= x1) { if (a < 0) a = i; b = i; }
    }
    if (a < 0) {  // a narrow drag between two middles: the interval under it
      for (i = 0; i < s.length; i++) if (s[i] <= x0 && x0 < s[i] + d[i]) { a = b = i; }
    }
    return [a, b];
  }

  function axisFmt(unit) {
    return function (u, splits) {
      return splits.map(function (v) {
        if (v === null) return "";
        if (unit === "s") return Number(v.toPrecision(3)) + " s";
        if (unit === "ms") return Number(v.toPrecision(3)) + " ms";
        if (unit === "s/s" && v !== 0 && Math.abs(v) < 1) {  // a narrow axis: 600 µs/s, not 0.0006 s/s
          return Math.abs(v) < 1e-3 ? Number((v * 1e6).toPrecision(3)) + " µs/s" : Number((v * 1e3).toPrecision(3)) + " ms/s";
        }
        if (unit === "/s") return v >= 1000 ? Number((v / 1000).toPrecision(3)) + "k/s" : Number(v.toPrecision(3)) + "/s";
        return Number(v.toPrecision(3)) + (unit ? " " + unit : "");
      });
    };
  }

  // a value axis as wide as its widest label ("500 ms/s" was cut to "00 ms/s" in a fixed 64 px); uPlot asks
  // again while the labels settle, and the width found first is kept from the third asking on
  function axisSize(u, values, axisIdx, cycleNum) {
    var axis = u.axes[axisIdx];
    if (cycleNum > 1 && axis._size) return axis._size;
    var widest = 0;
    if (values) {
      u.ctx.font = axis.font[0];
      for (var i = 0; i < values.length; i++) widest = Math.max(widest, u.ctx.measureText(values[i]).width);
    }
    return Math.max(40, Math.ceil(widest / (window.devicePixelRatio || 1)) + axis.ticks.size + axis.gap + 4);
  }

  var pending = [];  // charts are made once every box is in the grid, so each gets its own cell's width

  function chart(container, title, note, lines, axes, xs) {
    var box = el("div", "chart");
    box.appendChild(el("h4", "", title));
    if (note) box.appendChild(el("p", "note", note));
    var target = el("div", "plot");
    box.appendChild(target);
    container.appendChild(box);
    pending.push([target, lines, axes, xs]);
  }

  // an axis that starts at zero (`zero`), as a right-hand axis of its own should: its line's changes read at scale
  function fromZero(u, min, max) {
    return [0, max > 0 ? max * 1.05 : 1];
  }

  function makeChart(target, lines, axes, xs) {
    var width = Math.max(300, target.clientWidth || 560);
    var scales = {x: {time: false}};
    axes.forEach(function (ax) { if (ax.zero) scales[ax.scale] = {range: fromZero}; });
    var opts = {
      width: width, height: 190,
      cursor: {sync: {key: "stallscope"}, drag: {x: true, y: false, setScale: false}},
      select: {show: true},
      scales: scales,
      legend: {live: true},
      axes: [{values: axisFmt("s"), size: 34}].concat(axes.map(function (ax) {
        return {scale: ax.scale, side: ax.side || 3, values: axisFmt(ax.unit), size: axisSize, grid: {show: ax.side !== 1}};
      })),
      series: [{label: "time", value: function (u, v) { return v === null ? "-" : v.toFixed(1) + " s"; }}].concat(lines.map(function (l, k) {
        return {label: l.label, scale: l.scale, stroke: l.colour || PALETTE[k % PALETTE.length], width: 1.5, dash: l.dash, spanGaps: true,
                value: function (u, v) { return v === null ? "-" : l.value ? l.value(v) : Number(v.toPrecision(3)); }};
      })),
      hooks: {setSelect: [function (u) {
        if (u.select.width < 3 || !series) return;
        var x0 = u.posToVal(u.select.left, "x"), x1 = u.posToVal(u.select.left + u.select.width, "x");
        var r = intervalsIn(x0, x1);
        if (r[0] >= 0) setWindow(r[0], r[1]);
      }]}
    };
    var u = new window.uPlot(opts, [xs || series.charts.t].concat(lines.map(function (l) { return l.data; })), target);
    charts.push(u);
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(function () {
        var w = Math.max(300, target.clientWidth);
        if (Math.abs(w - u.width) > 4) u.setSize({width: w, height: 190});
      }).observe(target);
    }
  }

  function makeCharts() {
    pending.forEach(function (p) { makeChart(p[0], p[1], p[2], p[3]); });
    pending = [];
  }

  function drawCharts() {
    var box = document.getElementById("charts");
    if (!box) return;
    if (!series || !series.charts) {
      box.appendChild(el("p", "note", "This page has no per-interval data."));
      return;
    }
    var c = series.charts, secs = function (v) { return fmt.ns(v * 1e9) + "/s"; };
    var busyKept = (c.cpus_busy || []).some(function (v) { return v !== null; });
    chart(box, "Context switches against runnable tasks",
      "Runnable: tasks on a CPU plus tasks waiting for one, on average over each interval." +
      (busyKept ? " CPUs busy: the CPUs' busy time (/proc/stat) over the interval's; runnable tasks above it waited." : ""), [
      {label: "switches/s", data: c.cs_per_s, scale: "rate", value: function (v) { return fmt.rate(v); }},
      {label: "runnable tasks", data: c.runnable, scale: "tasks"}
    ].concat(busyKept ? [{label: "CPUs busy", data: c.cpus_busy, scale: "tasks", colour: "#5d6d7e", dash: [4, 3]}] : []),
      [{scale: "rate", unit: "/s"}, {scale: "tasks", unit: "", side: 1}]);
    // idle waits on an axis of their own: 5,000 sleeping threads are 5,000 s/s, which would flatten the blockers
    var idleLine = c.causes.some(function (l) { return l["class"] === "idle"; });
    chart(box, "Waiting, by cause", "Seconds of waiting per second: the number of tasks waiting for it, on average" +
      (idleLine ? "; idle waits dashed, on the right-hand axis." : "."),
      c.causes.map(function (l, k) {
        var idle = l["class"] === "idle";
        return {label: l.name, data: l.values, scale: idle ? "idle" : "w", value: secs, dash: idle ? [4, 3] : undefined,
                colour: idle ? "#7d8ea8" : l["class"] === "cpu" ? "#e0a31a" : PALETTE[(k + 2) % PALETTE.length]};
      }), [{scale: "w", unit: "s/s"}].concat(idleLine ? [{scale: "idle", unit: "s/s", side: 1, zero: true}] : []));
    chart(box, "Run queue: tasks waiting for a CPU, and wakeup-to-run p99", "", [
      {label: "waiting tasks", data: c.waiting, scale: "tasks", colour: "#e0a31a"},
      {label: "p99 latency", data: c.runq_p99_ms, scale: "ms", colour: "#2458b3", value: function (v) { return fmt.ns(v * 1e6); }}
    ], [{scale: "tasks", unit: ""}, {scale: "ms", unit: "ms", side: 1}]);
    chart(box, "Migrations per second", "", [
      {label: "migrations/s", data: c.migrations_per_s, scale: "rate", colour: "#00838f", value: function (v) { return fmt.rate(v); }}
    ], [{scale: "rate", unit: "/s"}]);
    chart(box, "Lock wait per second", "Kernel locks and user-space locks (futex) waited on, in seconds per second.", [
      {label: "lock wait", data: c.lock_wait, scale: "w", colour: "#8e24aa", value: secs}
    ], [{scale: "w", unit: "s/s"}]);
    if ((c.throttled_per_s || []).some(function (v) { return v > 0; })) {
      chart(box, "CPU quota throttling", "Cgroups held back by a CPU limit (cpu.stat): time throttled, summed over their CPUs, and periods throttled, per second.", [
        {label: "throttled", data: c.throttled, scale: "w", colour: "#c0392b", value: secs},
        {label: "periods/s", data: c.throttled_per_s, scale: "rate", colour: "#7f8c8d", dash: [4, 3], value: function (v) { return fmt.rate(v); }}
      ], [{scale: "w", unit: "s/s"}, {scale: "rate", unit: "/s", side: 1}]);
    }
  }
  function drawDiffCharts() {
    var box = document.getElementById("charts"), c = data.charts;
    if (!box || !c) return;
    var secs = function (v) { return fmt.ns(v * 1e9) + "/s"; }, rate = function (v) { return fmt.rate(v); };
    [["Waiting per second (blocked outside idle causes, and for a CPU)", "waiting", "s/s", secs],
     ["Waiting for a CPU per second", "runq", "s/s", secs],
     ["Context switches per second", "cs_per_s", "/s", rate],
     ["Lock wait per second", "lock_wait", "s/s", secs],
     ["Migrations per second", "migrations_per_s", "/s", rate]].forEach(function (spec) {
      chart(box, spec[0], "", [
        {label: "base", data: c[spec[1] + "_base"], scale: "y", colour: "#2458b3", value: spec[3]},
        {label: "new", data: c[spec[1] + "_new"], scale: "y", colour: "#d9534f", value: spec[3]}
      ], [{scale: "y", unit: spec[2]}], c.t);
    });
  }
  if (data.kind === "report") drawCharts();
  if (data.kind === "diff") drawDiffCharts();
  makeCharts();
  window.addEventListener("beforeprint", function () {  // a printed page shows every detail
    Array.prototype.forEach.call(document.querySelectorAll("details.fix"), function (d) { d.open = true; });
  });
  api.ready = true;
})();
