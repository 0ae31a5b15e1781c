// Browser notifications (Web Notifications API) for new calls the person may decide. No
// polling: the page's own socket (live.js) turns the server's `calls` control frame into a
// `gavel:live-calls` event; each call becomes a system notification when the person has
// given permission. Clicking one opens the call's card. On /settings/ a button asks for the
// permission (browsers only ask from a click) and the page says what the browser allows.
(function () {
  "use strict";

  var supported = "Notification" in window;

  function show(call) {
    var note = new window.Notification(call.title, { body: call.body, tag: "gavel-" + call.id });
    note.onclick = function () {
      window.focus();
      window.location.assign(call.url);
      note.close();
    };
  }

  document.addEventListener("gavel:live-calls", function (event) {
    if (!supported || window.Notification.permission !== "granted") return;
    var calls = (event.detail && event.detail.calls) || [];
    calls.forEach(show);
  });

  var TEXT = {
    granted: "This browser shows them.",
    denied: "This browser blocks them for this site: allow notifications in its site settings.",
    "default": "This browser has not been allowed to show them yet.",
    unsupported: "This browser cannot show notifications.",
  };

  function describe() {
    var state = document.getElementById("browser-permission");
    var ask = document.getElementById("browser-permission-ask");
    if (!state) return;
    var permission = supported ? window.Notification.permission : "unsupported";
    state.textContent = TEXT[permission] || "";
    state.setAttribute("data-state", permission);
    if (ask) ask.classList.toggle("is-hidden", permission !== "default");
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("#browser-permission-ask");
    if (!button || !supported) return;
    var asked = window.Notification.requestPermission(describe);
    if (asked && asked.then) asked.then(describe);
  });

  document.addEventListener("DOMContentLoaded", describe);
  document.addEventListener("htmx:afterSwap", describe); // the settings form re-rendered
})();
