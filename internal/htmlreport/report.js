// Hover: the column under the pointer, its events and the exact bytes.
// When every chart is wired, the drawn peaks are written on each figure and
// the body is marked ready, so a headless browser can check what was drawn.
(function () {
  "use strict";
  // fmt writes bytes as memory.FormatBytes does, so the tooltip and the
  // figures beside the chart agree: a size that rounds up to 1000.00 of a
  // prefix is shown in the next.
  function fmt(n) {
    if (n < 1000) return n + " B";
    var exp = 1, div = 1000;
    while (n / div >= 1000 && exp < 6) { exp++; div *= 1000; }
    if (exp < 6 && n / div >= 999.995) { exp++; div *= 1000; }
    return (n / div).toFixed(2) + " " + "KMGTPE"[exp - 1] + "B";
  }
  function exact(n) { return n.toLocaleString("en-US") + " B"; }
  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  // row: a total over a column's events, its range when they differ.
  function row(table, name, lo, hi) {
    var tr = document.createElement("tr");
    cell(tr, name);
    cell(tr, fmt(lo) === fmt(hi) ? fmt(hi) : fmt(lo) + " – " + fmt(hi), "n");
    cell(tr, lo === hi ? exact(hi) : lo.toLocaleString("en-US") + " – " + exact(hi), "n");
    table.appendChild(tr);
  }
  function wire(fig) {
    var data = JSON.parse(fig.querySelector('script[type="application/json"]').textContent);
    var svg = fig.querySelector("svg"), hit = svg.querySelector(".hit"), cursor = svg.querySelector(".cursor");
    var tip = fig.querySelector(".tip");
    var peakLive = 0, peakReserved = 0;
    data.cols.forEach(function (c) {
      if (!c) return;
      peakLive = Math.max(peakLive, c[3]);
      peakReserved = Math.max(peakReserved, c[5]);
    });
    fig.dataset.drawnPeakLive = String(peakLive);
    fig.dataset.drawnPeakReserved = String(peakReserved);
    var x0 = Number(hit.getAttribute("x")), w = Number(hit.getAttribute("width"));
    function show(ev) {
      var box = svg.getBoundingClientRect();
      var vx = (ev.clientX - box.left) * svg.viewBox.baseVal.width / box.width;
      var i = Math.floor(vx - x0);
      var c = data.cols[i];
      if (i < 0 || i >= w || !c) { hide(); return; }
      cursor.setAttribute("x1", x0 + i + 0.5);
      cursor.setAttribute("x2", x0 + i + 0.5);
      cursor.style.visibility = "visible";
      tip.textContent = "";
      var head = document.createElement("div");
      head.textContent = c[0] === c[1] ? "event " + c[0].toLocaleString("en-US")
        : "events " + c[0].toLocaleString("en-US") + "–" + c[1].toLocaleString("en-US");
      head.style.fontWeight = "600";
      tip.appendChild(head);
      var t = document.createElement("table");
      row(t, "live", c[2], c[3]);
      row(t, "reserved", c[4], c[5]);
      tip.appendChild(t);
      var sub = document.createElement("div");
      sub.textContent = "pools at event " + c[6].toLocaleString("en-US") + " (live / reserved):";
      sub.style.marginTop = "4px";
      tip.appendChild(sub);
      var pt = document.createElement("table");
      data.pools.forEach(function (name, k) {
        var tr = document.createElement("tr");
        var sw = cell(tr, "\u25A0");
        sw.style.color = data.colors[k];
        cell(tr, name);
        cell(tr, exact(c[7 + 2 * k]), "n");
        cell(tr, exact(c[8 + 2 * k]), "n");
        pt.appendChild(tr);
      });
      tip.appendChild(pt);
      tip.style.display = "block";
      var fx = ev.clientX - fig.getBoundingClientRect().left;
      var left = fx + 14;
      if (left + tip.offsetWidth > fig.clientWidth) left = Math.max(0, fx - 14 - tip.offsetWidth);
      tip.style.left = left + "px";
      tip.style.top = "8px";
    }
    function hide() {
      tip.style.display = "none";
      cursor.style.visibility = "hidden";
    }
    hit.addEventListener("mousemove", show);
    hit.addEventListener("mouseleave", hide);
  }
  var figs = document.querySelectorAll("figure.chart[data-run]");
  for (var k = 0; k < figs.length; k++) wire(figs[k]);
  document.body.dataset.charts = String(figs.length);
  document.body.dataset.ready = "yes";
})();
