/* The header's "updated 4 s ago": how old the page's figures are, counted on every second.
 *
 * #data-age carries `data-updated-at` (when the figures were current: the page's rendering, or when a
 * cluster's figures went stale) and `data-server-now` (the server's clock at rendering, so that a browser
 * whose clock is off still counts right). A live refetch (any htmx swap: the figures were read again just
 * now) restarts the count; a cluster turning stale sets it to when its figures stopped being current
 * (static/js/live.js dispatches "live:cluster" with the clusters' states). The words are the server's
 * (nodepools.hints.age_text). No framework.
 */
(function () {
  "use strict";

  var skew = 0; // server clock - browser clock, in ms

  function el() { return document.getElementById("data-age"); }

  function serverNow() { return Date.now() + skew; }

  function ageText(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + " s ago";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 48 * 3600) return Math.floor(seconds / 3600) + " h ago";
    var days = Math.floor(seconds / 86400);
    return days + (days === 1 ? " day ago" : " days ago");
  }

  function render() {
    var age = el();
    if (!age) return;
    var at = Date.parse(age.getAttribute("data-updated-at") || "");
    if (isNaN(at)) return;
    var text = age.querySelector(".data-age-text");
    if (!text) {
      age.textContent = "updated ";
      text = document.createElement("time");
      text.className = "data-age-text";
      age.appendChild(text);
    }
    text.setAttribute("datetime", new Date(at).toISOString());
    var words = ageText((serverNow() - at) / 1000);
    if (text.textContent !== words) text.textContent = words;
  }

  function setUpdated(iso, stale) {
    var age = el();
    if (!age) return;
    age.setAttribute("data-updated-at", iso);
    age.classList.toggle("data-age-stale", !!stale);
    render();
  }

  // A region swapped in: its figures were read from the server just now (unless a cluster is stale).
  document.addEventListener("htmx:afterSwap", function () {
    var age = el();
    if (age && !age.classList.contains("data-age-stale")) setUpdated(new Date(serverNow()).toISOString(), false);
  });

  // The clusters' state changed: stale since the oldest stale cluster's moment, else current now.
  document.addEventListener("live:cluster", function (event) {
    var clusters = (event.detail && event.detail.clusters) || [];
    if (!clusters.length) return;
    var stale = clusters.filter(function (c) { return c.stale && c.stale_since; })
      .map(function (c) { return c.stale_since; }).sort();
    if (stale.length) { setUpdated(stale[0], true); return; }
    // A cluster never synced has no figures to age: "not synced yet" only while none is synced.
    if (!clusters.some(function (c) { return c.last_full_sync; })) return;
    // Current again (a recovery): the figures follow the cluster from now on. A state that was current
    // already says nothing new about the figures on the page: their count goes on.
    var age = el();
    if (age && (age.classList.contains("data-age-stale") || !age.getAttribute("data-updated-at"))) {
      setUpdated(new Date(serverNow()).toISOString(), false);
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var age = el();
    if (!age) return;
    var server = Date.parse(age.getAttribute("data-server-now") || "");
    if (!isNaN(server)) skew = server - Date.now();
    render();
    window.setInterval(render, 1000);
  });

  window.consoleFreshness = { ageText: ageText };
})();
