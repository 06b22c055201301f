// vmesh console: live updates. The server sends a "tick" event with its
// change counter on /ui/events (at once, then on every push or config
// change); when it differs from the one this page was rendered at, the page
// fetches itself and swaps its #data part. Nothing is polled on a timer but
// the graph with rates from Prometheus (body data-refresh-every, in ms),
// whose rates change with no event.
(function () {
  "use strict";
  var body = document.body;
  var live = document.getElementById("live");
  var busy = false, again = false;

  function setLive(state, text) {
    body.dataset.live = state;
    live.textContent = text;
    live.className = "live " + state;
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { "Accept": "text/html" }, cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("data"), cur = document.getElementById("data");
        if (next && cur) { cur.replaceWith(document.importNode(next, true)); }
        body.dataset.version = doc.body.dataset.version;
        body.dataset.refreshes = String((Number(body.dataset.refreshes) || 0) + 1);
      })
      .catch(function () { /* the next tick tries again */ })
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  var every = Number(body.dataset.refreshEvery);
  if (every > 0) { setInterval(refresh, every); }

  if (!window.EventSource) { setLive("off", "no live updates"); return; }
  // A stream the server ends (its lifetime) is reopened by the browser;
  // one refused (too many streams open: 503) is closed for good by the
  // browser, so the page opens a new one itself after a while.
  function connect() {
    var es = new EventSource("/ui/events");
    es.onopen = function () { setLive("open", "live"); };
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED) {
        setLive("reconnecting", "live updates paused: the server is busy");
        setTimeout(connect, 20000 + Math.random() * 20000);
        return;
      }
      setLive("reconnecting", "reconnecting…");
    };
    es.addEventListener("tick", function (e) {
      setLive("open", "live");
      if (e.data !== body.dataset.version) { refresh(); }
    });
  }
  connect();
})();
