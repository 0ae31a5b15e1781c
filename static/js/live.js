// Live pages over WebSockets (htmx 2's ws extension, from django-htmx). No inline JS (CSP).
//
// The socket is an accelerator, the database the truth: every frame is htmx OOB swaps of the
// pages' own partials. A frame's element whose target is not on this page is dropped (a row
// of another page, a card filtered out); `data-live-unless="<selector>"` drops an append when
// that element is here already (so "replace if present, else append" needs no round trip);
// a pending card never replaces a decided one (`staleCard`).
// JSON frames are control: "hello" (subscribed, with the run's seq on a run page), "resync"
// (a hint was lost: re-fetch the partials over HTTP), "reconnecting" (the socket is open but
// the server's channel layer is down: nothing live arrives until a "resync"). A reconnect
// re-fetches them as well. #live-status shows "live" / "reconnecting…" / "offline".
(function () {
  "use strict";

  var LIST_FILTERS = ["principal", "no_principal", "conversation", "no_conversation", "agent",
    "status", "since", "until", "q", "before", "after"];

  function status(text, state) {
    var node = document.getElementById("live-status");
    if (!node) return;
    node.textContent = text;
    node.setAttribute("data-state", state);
    node.className = "live-status tag is-light " + (state === "live" ? "is-success" : "is-warning");
  }

  function filtered() {
    var params = new URLSearchParams(window.location.search);
    return LIST_FILTERS.some(function (name) { return params.get(name); });
  }

  function targetPresent(el) {
    var unless = el.getAttribute("data-live-unless");
    if (unless && document.querySelector(unless)) return false;
    if (el.hasAttribute("data-live-unfiltered") && filtered()) return false;
    var oob = el.getAttribute("hx-swap-oob") || "true";
    var colon = oob.indexOf(":");
    var selector = colon > 0 ? oob.slice(colon + 1) : (el.id ? "#" + CSS.escape(el.id) : "");
    if (!selector) return false;
    try {
      return document.querySelector(selector) !== null;
    } catch (error) {
      return false;
    }
  }

  // A call's decision is final. Frames of different events render concurrently and may
  // arrive out of order: a card rendered before the decision (an extension racing it, a
  // socket's state read just before it) never replaces the card that shows the decision.
  function staleCard(el) {
    if (!el.matches || !el.matches("article.approval-card[data-status=pending]") || !el.id) {
      return false;
    }
    var present = document.getElementById(el.id);
    return !!present && present.getAttribute("data-status") !== "pending";
  }

  function refetch(live) {
    var parts = (live.getAttribute("data-parts") || "").split(/\s+/).filter(Boolean);
    var pattern = live.getAttribute("data-refetch") || "";
    parts.forEach(function (name) {
      var url = pattern === "location" ? window.location.pathname + window.location.search
        : pattern.replace("{name}", encodeURIComponent(name));
      if (!url || !document.getElementById(name)) return;
      htmx.ajax("GET", url, { target: "#" + name, swap: "outerHTML" });
    });
  }

  function control(frame, live) {
    if (frame.seq !== undefined) live.setAttribute("data-seq", frame.seq);
    if (frame.live === "reconnecting") status("reconnecting…", "reconnecting");
    if (frame.live === "resync" || frame.live === "hello") status("live", "live");
    if (frame.live === "resync") refetch(live);
    live.dispatchEvent(new CustomEvent("gavel:live-" + frame.live, { bubbles: true, detail: frame }));
  }

  htmx.defineExtension("gavel-live", {
    transformResponse: function (text, xhr, elt) {
      if (xhr) return text; // only socket frames pass through here
      if (text.charAt(0) === "{") {
        try {
          control(JSON.parse(text), elt);
        } catch (error) {
          /* not ours */
        }
        return "";
      }
      var holder = document.createElement("template");
      holder.innerHTML = text;
      Array.prototype.slice.call(holder.content.children).forEach(function (el) {
        if (!targetPresent(el) || staleCard(el)) el.remove();
      });
      return holder.innerHTML;
    },
  });

  var opened = new WeakSet();

  document.addEventListener("htmx:wsConnecting", function (event) {
    if (!opened.has(event.target)) status("connecting…", "connecting");
  });

  document.addEventListener("htmx:wsOpen", function (event) {
    var live = event.target;
    status("live", "live");
    if (opened.has(live)) refetch(live); // a reconnect: what did we miss?
    opened.add(live);
  });

  document.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail && event.detail.event ? event.detail.event.code : 0;
    // 4403/4404: refused (signed out, no access); 4429: too many sockets open for this
    // person. The ws extension does not retry these.
    if (code === 4403 || code === 4404 || code === 4429 || code === 1000) status("offline", "offline");
    else status("reconnecting…", "reconnecting");
  });

  document.addEventListener("htmx:wsAfterMessage", function (event) {
    event.target.dispatchEvent(new CustomEvent("gavel:live-message", { bubbles: true }));
  });
})();
