// ankusa console: enhancement only. Every page reads and works without this file.
// - <time datetime> → the viewer's local time with a relative hint ("2 min ago");
// - [data-refresh="N"] → re-fetched every N s and swapped in place (live overview);
// - form[data-confirm] → asks before submitting.
(function () {
  "use strict";
  function rel(ms) {
    var d = Math.round((ms - Date.now()) / 1000), a = Math.abs(d), t;
    if (a < 60) t = a + " s";
    else if (a < 3600) t = Math.round(a / 60) + " min";
    else if (a < 86400) t = Math.round(a / 3600) + " h";
    else t = Math.round(a / 86400) + " d";
    return d >= 0 ? "in " + t : t + " ago";
  }
  function times(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var ms = Date.parse(el.getAttribute("datetime"));
      if (isNaN(ms)) return;
      el.title = el.getAttribute("datetime");
      el.textContent = new Date(ms).toLocaleString() + " (" + rel(ms) + ")";
    });
  }
  function refresh(el) {
    var every = parseInt(el.getAttribute("data-refresh"), 10) * 1000;
    if (!(every > 0)) return;
    setInterval(function () {
      if (document.hidden) return;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (text) {
          if (!text) return;
          var doc = new DOMParser().parseFromString(text, "text/html");
          var fresh = doc.querySelector("[data-refresh]");
          var live = document.querySelector("[data-refresh]");
          if (fresh && live) { live.replaceWith(fresh); times(fresh); }
        })
        .catch(function () {});
    }, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    times(document);
    var live = document.querySelector("[data-refresh]");
    if (live) refresh(live);
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
      });
    });
  });
})();
