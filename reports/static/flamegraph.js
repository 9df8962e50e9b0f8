/* stallscope's flame graph: a canvas icicle (the root on top), drawn from a preorder tree of parallel
   arrays (reports/flametree.py). Zoom by click, search with the matched share, hover for time and
   share, reset; colours by cause class, by name, or by the change between two profiles (red grew,
   blue shrank: FlameGraph's convention). Only the frames wide enough to see are laid out: a subtree
   narrower than half a pixel is skipped whole, so a zoom costs what is on screen, not the tree's size.
   Text reaches the page only through textContent and the canvas. */
(function () {
  "use strict";

  var ROW = 17, MIN_W = 0.5, PAD = 3, MATCH = "#d35ce6";
  var FONT = '11.5px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';

  function hash(s) {  // FNV-1a: a stable small variation per name
    var h = 2166136261;
    for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }

  function FlameGraph(canvas, tip, options) {
    this.canvas = canvas;
    this.tip = tip;
    this.opts = options || {};
    this.ctx = canvas.getContext("2d");
    this.zoomed = 0;
    this.query = "";
    this.lastDrawMs = 0;
    this.rects = null;
    var self = this;
    canvas.addEventListener("mousemove", function (e) { self._hover(e); });
    canvas.addEventListener("mouseleave", function () { self.tip.hidden = true; });
    canvas.addEventListener("click", function (e) {
      var i = self._hit(e);
      if (i >= 0) self.zoom(i);
    });
    if (typeof ResizeObserver !== "undefined") {
      var last = 0;
      new ResizeObserver(function () {
        var w = canvas.clientWidth;
        if (w && w !== last && self.tree) { last = w; self.draw(); }
      }).observe(canvas.parentNode);
    }
  }

  /* tree: {names, name, depth, cause, values: {key: [...]}, causes, classes, unit_ns}
     mode: {keys: [keys summed for the width], colour: "class" | "name" | "diff", base, next} */
  FlameGraph.prototype.setTree = function (tree, mode) {
    var n = tree.name.length, i;
    this.tree = tree;
    this.mode = mode;
    this.n = n;
    this.nameIdx = Int32Array.from(tree.name);
    this.depth = Int32Array.from(tree.depth);
    this.end = new Int32Array(n);
    this.parent = new Int32Array(n);
    var stack = [], maxDepth = 0;
    for (i = 0; i < n; i++) {
      var d = this.depth[i];
      while (stack.length && this.depth[stack[stack.length - 1]] >= d) this.end[stack.pop()] = i;
      this.parent[i] = stack.length ? stack[stack.length - 1] : -1;
      stack.push(i);
      if (d > maxDepth) maxDepth = d;
    }
    while (stack.length) this.end[stack.pop()] = n;
    this.maxDepth = maxDepth;
    this.next = new Float64Array(maxDepth + 2);
    this.zoomed = 0;
    this.setKeys(mode.keys);
  };

  FlameGraph.prototype.setKeys = function (keys) {
    var n = this.n, v = new Float64Array(n), vals = this.tree.values;
    for (var k = 0; k < keys.length; k++) {
      var a = vals[keys[k]];
      if (!a) continue;
      for (var i = 0; i < n; i++) v[i] += a[i];
    }
    this.mode.keys = keys;
    this.v = v;
    this._colours();
    this._match();
    this.draw();
  };

  FlameGraph.prototype._colours = function () {
    var n = this.n, t = this.tree, mode = this.mode, names = t.names, out = new Array(n), ink = null, i;
    var nameHash = new Float64Array(names.length);
    for (i = 0; i < names.length; i++) nameHash[i] = hash(names[i]);
    if (mode.colour === "diff") {
      var base = t.values[mode.base], next = t.values[mode.next], peak = 0;
      for (i = 1; i < n; i++) peak = Math.max(peak, Math.abs(next[i] - base[i]));
      ink = new Uint8Array(n);  // 1: white text on a deep colour
      for (i = 0; i < n; i++) {
        var r = peak ? (next[i] - base[i]) / peak : 0, k = Math.round(190 * Math.min(1, Math.abs(r)));
        out[i] = r > 0 ? "rgb(255," + (235 - k) + "," + (235 - k) + ")"
               : r < 0 ? "rgb(" + (235 - k) + "," + (235 - k) + ",255)" : "rgb(238,238,238)";
        ink[i] = k > 110 ? 1 : 0;
      }
    } else if (mode.colour === "class") {
      var b = t.values.blocker, c = t.values.cpu, id = t.values.idle, useIdle = mode.keys.indexOf("idle") >= 0;
      for (i = 0; i < n; i++) {
        var h = nameHash[this.nameIdx[i]], vb = b[i], vc = c[i], vi = useIdle ? id[i] : 0;
        if (vi > vb && vi > vc) out[i] = "hsl(" + (205 + 20 * h).toFixed(0) + ",28%," + (62 + 12 * h).toFixed(0) + "%)";
        else if (vc > vb) out[i] = "hsl(" + (38 + 12 * h).toFixed(0) + ",88%," + (55 + 10 * h).toFixed(0) + "%)";
        else out[i] = "hsl(" + (4 + 22 * h).toFixed(0) + ",78%," + (60 + 10 * h).toFixed(0) + "%)";
      }
    } else {
      for (i = 0; i < n; i++) {
        var g = nameHash[this.nameIdx[i]];
        out[i] = "hsl(" + (10 + 45 * g).toFixed(0) + ",85%," + (58 + 10 * g).toFixed(0) + "%)";
      }
    }
    this.colours = out;
    this.ink = ink;
  };

  FlameGraph.prototype.zoom = function (i) { this.zoomed = i; this._match(); return this.draw(); };
  FlameGraph.prototype.reset = function () { return this.zoom(0); };

  FlameGraph.prototype.search = function (text) { this.query = text || ""; this._match(); return this.draw(); };

  FlameGraph.prototype._match = function () {
    var names = this.tree.names, q = this.query, m = null, i;
    if (q) {
      var re = null;
      if (q.length > 2 && q[0] === "/" && q[q.length - 1] === "/") {
        try { re = new RegExp(q.slice(1, -1), "i"); } catch (e) { re = null; }
      }
      var low = q.toLowerCase();
      m = new Uint8Array(names.length);
      for (i = 0; i < names.length; i++) m[i] = re ? (re.test(names[i]) ? 1 : 0) : (names[i].toLowerCase().indexOf(low) >= 0 ? 1 : 0);
    }
    this.matched = m;
    var z = this.zoomed, total = this.v[z], sum = 0;
    if (m) {
      // a match inside a matched frame is already counted: skip the subtree
      for (i = z; i < this.end[z];) {
        if (m[this.nameIdx[i]]) { sum += this.v[i]; i = this.end[i]; } else i++;
      }
    }
    this.matchValue = sum;
    this.matchShare = m && total ? sum / total : 0;
    if (this.opts.onMatch) this.opts.onMatch(m ? this : null);
  };

  FlameGraph.prototype._layout = function (width) {
    var z = this.zoomed, v = this.v, depth = this.depth, end = this.end, next = this.next;
    var xs = [], ws = [], ids = [], rows = [];
    var scale = v[z] ? width / v[z] : 0, dz = depth[z], a, d;
    for (d = 0; d <= this.maxDepth + 1; d++) rows.push([]);
    var chain = [];
    for (a = this.parent[z]; a >= 0; a = this.parent[a]) chain.push(a);
    for (var k = chain.length - 1; k >= 0; k--) {
      rows[depth[chain[k]]].push(xs.length); xs.push(0); ws.push(width); ids.push(chain[k]);
    }
    next[dz] = 0;
    var deepest = dz, stop = end[z];
    for (var i = z; i < stop;) {
      d = depth[i];
      var x = next[d], w = v[i] * scale;
      next[d] = x + w;
      if (w < MIN_W) { i = end[i]; continue; }
      rows[d].push(xs.length); xs.push(x); ws.push(w); ids.push(i);
      if (d > deepest) deepest = d;
      next[d + 1] = x;
      i++;
    }
    return {xs: xs, ws: ws, ids: ids, rows: rows, deepest: deepest};
  };

  FlameGraph.prototype.draw = function () {
    var t0 = performance.now();
    if (!this.tree) return 0;
    var canvas = this.canvas, ctx = this.ctx, width = canvas.clientWidth || 800;
    var L = this._layout(width);
    var height = (L.deepest + 1) * ROW + 2, dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.height = height + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    if (!this.charW) this.charW = ctx.measureText("MMMMMMMMMM").width / 10;
    var names = this.tree.names, m = this.matched, colours = this.colours, dz = this.depth[this.zoomed];
    var depth = this.depth, nameIdx = this.nameIdx, minText = this.charW * 3 + PAD;
    // The rectangles of one colour are filled together: setting a colour costs more than filling a narrow
    // rectangle, and a zoom into a wide frame fills some 20,000 of them in a few hundred colours. They do not
    // overlap, so the order they are filled in does not matter. The frames above the zoomed one are faded.
    var groups = new Map(), labels = [];
    for (var r = 0; r < L.ids.length; r++) {
      var i = L.ids[r], w = L.ws[r], hit = m && m[nameIdx[i]];
      if (depth[i] < dz) {
        ctx.globalAlpha = 0.55;
        ctx.fillStyle = hit ? MATCH : colours[i];
        ctx.fillRect(L.xs[r], depth[i] * ROW, Math.max(w - 0.6, 0.5), ROW - 1);
        ctx.globalAlpha = 1;
      } else {
        var key = hit ? MATCH : colours[i], group = groups.get(key);
        if (group === undefined) groups.set(key, group = []);
        group.push(r);
      }
      if (w > minText) labels.push(r);
    }
    groups.forEach(function (rs, colour) {
      ctx.fillStyle = colour;
      for (var k = 0; k < rs.length; k++) {
        var r = rs[k];
        ctx.fillRect(L.xs[r], depth[L.ids[r]] * ROW, Math.max(L.ws[r] - 0.6, 0.5), ROW - 1);
      }
    });
    for (var k = 0; k < labels.length; k++) {
      var r = labels[k], i = L.ids[r], x = L.xs[r], w = L.ws[r], hit = m && m[nameIdx[i]];
      var name = names[nameIdx[i]], fit = Math.floor((w - 2 * PAD) / this.charW);
      ctx.globalAlpha = depth[i] < dz ? 0.55 : 1;
      ctx.fillStyle = this.ink && this.ink[i] && !hit ? "#ffffff" : "#161a22";
      ctx.fillText(name.length > fit ? name.slice(0, Math.max(fit - 1, 1)) + "…" : name, x + PAD,
                   depth[i] * ROW + ROW / 2);
    }
    ctx.globalAlpha = 1;
    this.rects = L;
    this.lastDrawMs = performance.now() - t0;
    return this.lastDrawMs;
  };

  FlameGraph.prototype._hit = function (e) {
    var L = this.rects;
    if (!L) return -1;
    var box = this.canvas.getBoundingClientRect(), mx = e.clientX - box.left, my = e.clientY - box.top;
    var d = Math.floor(my / ROW), row = L.rows[d];
    if (!row || !row.length) return -1;
    var lo = 0, hi = row.length - 1;
    while (lo < hi) {  // the last rect starting at or before mx
      var mid = (lo + hi + 1) >> 1;
      if (L.xs[row[mid]] <= mx) lo = mid; else hi = mid - 1;
    }
    var r = row[lo];
    return L.xs[r] <= mx && mx < L.xs[r] + L.ws[r] ? L.ids[r] : -1;
  };

  FlameGraph.prototype._hover = function (e) {
    var i = this._hit(e), tip = this.tip;
    if (i < 0) { tip.hidden = true; return; }
    var lines = this.describe(i);
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    for (var k = 0; k < lines.length; k++) {
      var div = document.createElement("div");
      div.textContent = lines[k][0];
      if (lines[k][1]) div.className = lines[k][1];
      tip.appendChild(div);
    }
    tip.hidden = false;
    var box = this.canvas.parentNode.getBoundingClientRect(), scroller = this.canvas.parentNode;
    var x = e.clientX - box.left + scroller.scrollLeft + 14, y = e.clientY - box.top + scroller.scrollTop + 14;
    if (x + tip.offsetWidth > scroller.clientWidth + scroller.scrollLeft) x = Math.max(0, x - tip.offsetWidth - 28);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  };

  /* [text, class] lines for node i: name, time, shares, and (by mode) the class split or the change */
  FlameGraph.prototype.describe = function (i) {
    var t = this.tree, unit = t.unit_ns, fmt = this.opts.format, v = this.v, mode = this.mode;
    var out = [[t.names[this.nameIdx[i]], "tname"]];
    var share = v[0] ? 100 * v[i] / v[0] : 0, zshare = v[this.zoomed] ? 100 * v[i] / v[this.zoomed] : 0;
    if (mode.colour === "diff") {
      var b = t.values[mode.base][i] * unit, n = t.values[mode.next][i] * unit, d = n - b;
      out.push([mode.baseLabel + ": " + fmt.ns(b) + "/s", ""]);
      out.push([mode.nextLabel + ": " + fmt.ns(n) + "/s", ""]);
      out.push(["change: " + (d >= 0 ? "+" : "-") + fmt.ns(Math.abs(d)) + "/s" + (b ? " (" + (d >= 0 ? "+" : "") + (100 * d / b).toFixed(0) + "%)" : " (new)"),
                d > 0 ? "grew" : d < 0 ? "shrank" : ""]);
    } else {
      out.push([fmt.ns(v[i] * unit) + " · " + share.toFixed(2) + "% of all" + (this.zoomed ? ", " + zshare.toFixed(2) + "% of the zoomed frame" : ""), ""]);
    }
    if (mode.colour === "class") {
      var parts = [], labels = {blocker: "blocked", cpu: "waiting for a CPU", idle: "idle"};
      for (var k = 0; k < mode.keys.length; k++) {
        var x = t.values[mode.keys[k]][i];
        if (x) parts.push(labels[mode.keys[k]] + " " + fmt.ns(x * unit));
      }
      if (parts.length > 1) out.push([parts.join(", "), ""]);
      var c = t.cause[i];
      if (c >= 0) out.push(["cause: " + t.causes[c], ""]);
    }
    return out;
  };

  window.StallscopeFlameGraph = FlameGraph;
})();
