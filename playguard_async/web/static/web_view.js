// Live updates for the web view: one server-sent event stream per page; on each new version of
// the replica's fleet picture, the page is fetched again and its <main> swapped in place. The
// page works without this file; EventSource reconnects by itself after a replica restarts.
// At most one fetch is in flight: versions announced during a fetch make one more fetch after it,
// however many they are (none when the page that came is already the last one announced).
// While someone fills in an action's form (it has the focus, or a field was changed), <main> is
// left alone and looked at again a second later: a swap would throw away what they typed.
// A button with data-confirm (abort, unlock) asks before its form is sent; without this file
// the form is sent at once, as every form here works without it.
"use strict";
(function () {
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) {
      event.preventDefault();
    }
  });

  var banner = document.getElementById("live-banner");
  var shown = document.body.dataset.version;
  var announced = shown;
  var fetching = false;
  var asked = null;
  var source = new EventSource("/events");

  function editing() {
    var active = document.activeElement;
    if (active && active.closest && active.closest("main form")) {
      return true;
    }
    return Array.prototype.some.call(
      document.querySelectorAll("main form.actions input:not([type=hidden])"),
      function (field) { return field.value !== field.defaultValue; }
    );
  }

  function warn(text) {
    banner.textContent = text;
    banner.hidden = false;
  }

  function refresh() {
    fetching = true;
    asked = announced;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        if (editing()) {
          window.setTimeout(function () {
            if (!fetching) {
              refresh();
            }
          }, 1000);
          return;
        }
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
      })
      .finally(function () {
        fetching = false;
        if (announced !== asked && announced !== shown) {
          refresh();
        }
      });
  }

  source.onmessage = function (event) {
    banner.hidden = true;
    announced = String(JSON.parse(event.data).version);
    if (announced !== shown && !fetching) {
      refresh();
    }
  };
  source.onerror = function () {
    if (source.readyState === EventSource.CLOSED) {
      // Refused (too many open pages, or the credential) or answered with an error: the
      // browser does not try again by itself.
      warn("No live updates from this replica for this page; reload it to try again.");
    } else {
      warn("Lost the live stream from this replica; reconnecting…");
    }
  };
})();
