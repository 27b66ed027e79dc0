// The status page's refresh: fetch the server-rendered body again and swap it in. No build step,
// no framework. A 401 means the token went (revoked, or the cookie expired): reload to show the form.
(function () {
  "use strict";
  var me = document.currentScript;
  var every = Math.max(1, parseFloat((me && me.dataset.refresh) || "5")) * 1000;
  var failedSince = null;

  function stamp(text, stale) {
    var el = document.getElementById("updated");
    if (!el) return;
    el.textContent = text;
    el.classList.toggle("stale", !!stale);
  }

  function refresh() {
    var target = document.getElementById("status");
    if (!target || document.hidden) return;
    fetch("/ui/fragment", { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) {
        if (answer.status === 401) {
          window.location.reload();
          return null;
        }
        if (!answer.ok) throw new Error("HTTP " + answer.status);
        return answer.text();
      })
      .then(function (html) {
        if (html === null) return;
        var open = {};
        target.querySelectorAll("details[open]").forEach(function (d) { open[d.id] = true; });
        target.innerHTML = html;
        target.querySelectorAll("details").forEach(function (d) { if (open[d.id]) d.open = true; });
        failedSince = null;
        var now = target.querySelector("[data-now]");
        var t = now ? new Date(now.dataset.now) : new Date();
        stamp("updated " + t.toISOString().substring(11, 19) + " UTC");
      })
      .catch(function () {
        failedSince = failedSince || new Date();
        stamp("server not answering since " + failedSince.toISOString().substring(11, 19) + " UTC: data is stale", true);
      });
  }

  setInterval(refresh, every);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
