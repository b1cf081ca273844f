/* Live tables and small conveniences of the console (no framework besides htmx).
 *
 * Pages that follow the database put `data-live-clusters="1,2"` on <body> and mark each region that
 * should refetch with `data-live="nodes pods pools"` (the kinds of change it shows) and an id. The
 * server sends hints over /ws/live/; the region refetches itself through its normal view (the same
 * URL with the current query string, HX-Target = its id), so filters, sort and permissions apply.
 * When the connection drops, #live-status says so and the socket reconnects with backoff; on
 * reconnecting, every region refetches once (a hint may have been missed); so does the first connection
 * when it came more than a second after the page was rendered (a hint sent meanwhile reached no one).
 * The same socket carries the state of those clusters ({"type": "cluster"}: connected, degraded,
 * unreachable, stale since, last full sync), rendered by the server: the badges in the top bar
 * (#cluster-badges) and the banners above the page (#cluster-banners) are replaced as they come.
 */
(function () {
  "use strict";

  function autosubmit() {
    document.querySelectorAll("select[data-autosubmit]").forEach(function (el) {
      if (el.getAttribute("data-bound")) return;
      el.setAttribute("data-bound", "1");
      el.addEventListener("change", function () { el.form.submit(); });
    });
  }

  function regions() { return Array.prototype.slice.call(document.querySelectorAll("[data-live][id]")); }

  // A disclosure someone opened (a workload's reason story: `data-keep-open`, by its id) stays open when a live
  // refetch replaces its table, and when the cells filled in after the page (out of band) replace it.
  var keptOpen = {};
  document.addEventListener("toggle", function (event) {
    var d = event.target;
    if (!d.matches || !d.matches("details[data-keep-open]") || !d.id) return;
    if (d.open) keptOpen[d.id] = true; else delete keptOpen[d.id];
  }, true);
  function reopen() {
    Object.keys(keptOpen).forEach(function (key) { var d = document.getElementById(key); if (d && !d.open) d.open = true; });
  }
  document.addEventListener("htmx:oobAfterSwap", reopen);

  var pending = {}, inflight = {};
  function refetch(el) {
    var id = el.id;
    // Someone is typing in an inline editor of this region: do not swap it away; the editor's own
    // save or close brings the region up to date.
    if (el.querySelector("[data-live-hold]")) return;
    if (inflight[id]) { pending[id] = true; return; }
    inflight[id] = true;
    var url = el.getAttribute("data-live-url") || (window.location.pathname + window.location.search);
    var done = function () {
      inflight[id] = false;
      if (pending[id]) { pending[id] = false; var again = document.getElementById(id); if (again) refetch(again); }
      document.dispatchEvent(new CustomEvent("live:refreshed", { detail: { id: id } }));
    };
    if (!window.htmx) { done(); return; }
    var before = cellTexts(el);
    var swapped = function () { reopen(); markChanged(document.getElementById(id), before); done(); };
    window.htmx.ajax("GET", url, { target: "#" + id, swap: "outerHTML" }).then(swapped, done);
  }

  // A cell whose text a live refetch changed is marked for a moment (class live-changed, ~2 s; the CSS
  // animates it only without prefers-reduced-motion). Cells are matched by table, row (its data-*
  // attributes, else its first cell) and column (its header): a sort or a new row marks nothing.
  var MARK_MS = 2000;
  function cellKeys(region, visit) {
    if (!region) return;
    region.querySelectorAll("table").forEach(function (table, t) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) { return th.textContent.trim(); });
      table.querySelectorAll("tbody > tr").forEach(function (tr) {
        var key = Array.prototype.filter.call(tr.attributes, function (a) { return a.name.indexOf("data-") === 0; })
          .map(function (a) { return a.name + "=" + a.value; }).join("&");
        var cells = Array.prototype.filter.call(tr.children, function (c) { return c.tagName === "TD"; });
        if (!key && cells.length) key = cells[0].textContent.trim();
        cells.forEach(function (td, i) { visit(t + "|" + key + "|" + (heads[i] || i), td); });
      });
    });
  }
  function cellText(td) { return td.textContent.replace(/\s+/g, " ").trim(); }
  function cellTexts(region) {
    var texts = {};
    cellKeys(region, function (key, td) { texts[key] = cellText(td); });
    return texts;
  }
  function markChanged(region, before) {
    var marked = [];
    cellKeys(region, function (key, td) {
      if (Object.prototype.hasOwnProperty.call(before, key) && before[key] !== cellText(td)) {
        td.classList.add("live-changed");
        marked.push(td);
      }
    });
    if (marked.length) {
      setTimeout(function () { marked.forEach(function (td) { td.classList.remove("live-changed"); }); }, MARK_MS);
    }
  }

  var timers = {};
  function hinted(kinds) {
    regions().forEach(function (el) {
      var wanted = (el.getAttribute("data-live") || "").split(/\s+/);
      // At once: a burst of hints is coalesced by `refetch` itself (one refetch in flight per region, and
      // at most one more after it), so waiting first would only delay the change on its way to the page.
      if (kinds.some(function (k) { return wanted.indexOf(k) >= 0; })) refetch(el);
    });
  }

  function status(state) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.hidden = false;
    el.className = "live live-" + state;
    el.textContent = state === "on" ? "Live" : "Live updates disconnected — reconnecting…";
    el.setAttribute("data-state", state);
  }

  function clusterState(data) {
    var badges = document.getElementById("cluster-badges");
    if (badges && typeof data.badges === "string") badges.innerHTML = data.badges;
    var banners = document.getElementById("cluster-banners");
    if (banners && typeof data.banners === "string") banners.innerHTML = data.banners;
    document.dispatchEvent(new CustomEvent("live:cluster", { detail: { clusters: data.clusters || [] } }));
  }

  function refetchAll() {
    regions().forEach(function (el) {
      clearTimeout(timers[el.id]);
      timers[el.id] = setTimeout(function () { var cur = document.getElementById(el.id); if (cur) refetch(cur); }, 80);
    });
  }

  // The clusters' hint marks the page was rendered at ("1:57,2:3"), compared with the hello's.
  function missedSinceRendered(marks) {
    var rendered = {};
    (document.body.getAttribute("data-live-marks") || "").split(",").forEach(function (part) {
      var kv = part.split(":");
      if (kv.length === 2) rendered[kv[0]] = kv[1];
    });
    return Object.keys(marks).some(function (id) { return String(marks[id]) !== rendered[id]; });
  }
  function connect() {
    var clusters = document.body.getAttribute("data-live-clusters");
    if (clusters === null || !window.WebSocket) return;
    if (!regions().length && !document.getElementById("cluster-banners")) return;
    var delay = 500, socket = null, everConnected = false;
    function open() {
      var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + window.location.host + "/ws/live/?state=1&clusters=" + encodeURIComponent(clusters));
      window.consoleLive = { socket: socket };
      socket.onopen = function () {
        delay = 500;
        status("on");
        // After a reconnect, hints may have been missed: refetch. On the first connection, the hello's
        // marks say whether a hint went out between this page's rendering and now.
        if (everConnected) refetchAll();
        everConnected = true;
      };
      socket.onmessage = function (event) {
        var data;
        try { data = JSON.parse(event.data); } catch (e) { return; }
        if (data.type === "hello" && missedSinceRendered(data.marks || {})) refetchAll();
        else if (data.type === "changed") hinted(data.kinds || []);
        else if (data.type === "cluster") clusterState(data);
      };
      socket.onclose = function () {
        status("off");
        setTimeout(open, delay + Math.random() * delay * 0.3);
        delay = Math.min(delay * 2, 15000);
      };
    }
    status("off");
    open();
    setInterval(function () {
      if (socket && socket.readyState === 1) socket.send(JSON.stringify({ type: "ping" }));
    }, 25000);
  }

  // The column chooser returns to the address the page shows now: filters, sort and page may have changed
  // since the page was loaded (htmx swaps the table and pushes the new address), so `next` is taken at submit.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.closest || !form.closest(".columns-chooser")) return;
    var next = form.querySelector("input[name=next]");
    if (next) next.value = window.location.pathname + window.location.search;
  }, true);

  // Quota grid: a department's <details> folds its project rows (all rows show without JavaScript).
  document.addEventListener("toggle", function (event) {
    var details = event.target;
    if (!details.classList || !details.classList.contains("expander")) return;
    var body = details.closest("tbody");
    if (!body) return;
    body.querySelectorAll("tr.project-row").forEach(function (row) { row.hidden = !details.open; });
  }, true);

  document.addEventListener("DOMContentLoaded", function () { autosubmit(); connect(); });
  document.addEventListener("htmx:afterSwap", autosubmit);
})();
