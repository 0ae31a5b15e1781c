// Gavel's own small behaviours (CSP: script-src 'self', so no inline scripts anywhere).
// Copy buttons: <button data-copy="text"> puts the text on the clipboard.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.getAttribute("data-copy"));
});

// The header's menu button (under 769 px): without script the links simply stay shown.
document.documentElement.classList.add("js");
document.addEventListener("click", function (event) {
  var toggle = event.target.closest(".nav-toggle");
  if (!toggle) return;
  var menu = document.getElementById(toggle.getAttribute("aria-controls"));
  var open = toggle.getAttribute("aria-expanded") !== "true";
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
  menu.classList.toggle("is-open", open);
});
document.addEventListener("keydown", function (event) {
  if (event.key !== "Escape") return;
  var toggle = document.querySelector(".nav-toggle[aria-expanded='true']");
  if (!toggle) return;
  toggle.setAttribute("aria-expanded", "false");
  document.getElementById(toggle.getAttribute("aria-controls")).classList.remove("is-open");
  toggle.focus();
});

// A region that scrolls is reachable from the keyboard (WCAG 2.1.1): it takes focus while its
// content is wider or taller than it is (a table wider than a phone, a long JSON <pre>).
function gavelScrollersFocusable(root) {
  (root || document).querySelectorAll(".table-wrap, .table-scroll, .table-container, .panel-box > .table, .box > .table, pre").forEach(function (box) {
    var scrolls = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
    if (scrolls && !box.hasAttribute("tabindex")) {
      box.setAttribute("tabindex", "0");
      if (!box.hasAttribute("role")) box.setAttribute("role", "region");
      if (!box.hasAttribute("aria-label")) {
        var heading = box.closest("section, details, .panel-box");
        var label = heading && heading.querySelector("h2, h3, summary");
        box.setAttribute("aria-label", (label ? label.textContent.trim() : "Table") + " (scrolls)");
      }
    }
  });
}
document.addEventListener("DOMContentLoaded", function () { gavelScrollersFocusable(); });
window.addEventListener("resize", function () { gavelScrollersFocusable(); });
document.addEventListener("htmx:afterSettle", function (event) { gavelScrollersFocusable(event.target); });
document.addEventListener("toggle", function (event) { gavelScrollersFocusable(event.target); }, true);

// The /manage/ tabs scroll sideways on a phone: the current one is brought into view.
document.addEventListener("DOMContentLoaded", function () {
  var current = document.querySelector(".manage-tabs [aria-current='page']");
  var strip = current && current.closest(".manage-tabs");
  if (strip && strip.scrollWidth > strip.clientWidth) {
    var offset = current.getBoundingClientRect().left - strip.getBoundingClientRect().left;
    strip.scrollLeft += offset - (strip.clientWidth - current.offsetWidth) / 2;
  }
});

// A form answered with refused fields: the first of them takes focus (and so comes into view,
// however far down a phone's page the form is), unless something asked for focus already.
document.addEventListener("DOMContentLoaded", function () {
  if (document.querySelector("[autofocus]")) return;
  var refused = document.querySelector("form [aria-invalid='true']");
  if (refused) refused.focus();
});
