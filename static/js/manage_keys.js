// /manage/keys/ and /manage/webhooks/: "Copy" puts a secret shown once on the clipboard and
// says so. <button data-copy-from="#id"> copies the text of that element.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy-from]");
  if (!button) return;
  var source = document.querySelector(button.getAttribute("data-copy-from"));
  var status = button.parentElement.querySelector(".copy-status");
  if (!source) return;
  function said(text) {
    if (status) status.textContent = text;
  }
  if (!navigator.clipboard) {
    said("Select the text and copy it.");
    return;
  }
  navigator.clipboard.writeText(source.textContent.trim()).then(
    function () {
      button.textContent = button.getAttribute("data-copied-label") || "Copied";
      said("Copied to the clipboard.");
    },
    function () {
      said("Could not copy: select the text and copy it.");
    }
  );
});
