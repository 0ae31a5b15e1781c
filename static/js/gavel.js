// Gavel's own small behaviours (CSP: script-src 'self', so no inline scripts anywhere).
// Copy buttons: <button data-copy="text"> puts the text on the clipboard.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.getAttribute("data-copy"));
});
