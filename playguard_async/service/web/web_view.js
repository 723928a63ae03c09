// Live updates for the web view: one server-sent event stream per page; on each new version of
// the replica's fleet picture, the page is fetched again and its <main> swapped in place. The
// page works without this file; EventSource reconnects by itself after a replica restarts.
"use strict";
(function () {
  var banner = document.getElementById("live-banner");
  var shown = document.body.dataset.version;
  var source = new EventSource("/events");

  function warn(text) {
    banner.textContent = text;
    banner.hidden = false;
  }

  function refresh() {
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        var main = fresh.querySelector("main");
        var old = document.querySelector("main");
        if (main && old) {
          old.replaceWith(document.importNode(main, true));
        }
        shown = fresh.body.dataset.version;
        document.body.dataset.version = shown;
      })
      .catch(function (error) {
        warn("Could not refresh the page from this replica (" + error.message + ").");
      });
  }

  source.onmessage = function (event) {
    banner.hidden = true;
    var version = String(JSON.parse(event.data).version);
    if (version !== shown) {
      shown = version;
      refresh();
    }
  };
  source.onerror = function () {
    warn("Lost the live stream from this replica; reconnecting…");
  };
})();
