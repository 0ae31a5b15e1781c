// The reviewer's inbox: keyboard (J/K move, A approve, D deny, E edit the message), the JSON
// editor's validation (invalid JSON never leaves the browser), revealing masked values and the
// expiry countdowns. No inline JS anywhere (CSP: script-src 'self').
(function () {
  "use strict";

  function cards() {
    return Array.prototype.slice.call(document.querySelectorAll("article.approval-card"));
  }

  function currentCard() {
    var active = document.activeElement;
    return active && active.closest ? active.closest("article.approval-card") : null;
  }

  function move(step) {
    var list = cards();
    if (!list.length) return;
    var index = list.indexOf(currentCard());
    var next = index < 0 ? 0 : Math.min(list.length - 1, Math.max(0, index + step));
    list[next].focus();
    list[next].scrollIntoView({ block: "nearest" });
  }

  function typing(target) {
    var tag = (target && target.tagName) || "";
    return tag === "TEXTAREA" || tag === "INPUT" || tag === "SELECT" || target.isContentEditable;
  }

  function press(card, selector) {
    var button = card && card.querySelector(selector);
    if (button) button.click();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    var key = event.key.toLowerCase();
    var card = currentCard();
    if (key === "j") move(1);
    else if (key === "k") move(-1);
    else if (key === "a") press(card, "button.decide-approve");
    else if (key === "d") press(card, "button.decide-deny");
    else if (key === "e" && card) {
      var message = card.querySelector("textarea.decision-message");
      if (message) message.focus();
    } else return;
    event.preventDefault();
  });

  // ---- the JSON editor ----------------------------------------------------------------------
  function jsonProblem(textarea) {
    if (!textarea || !textarea.value.trim()) return null;
    try {
      JSON.parse(textarea.value);
      return null;
    } catch (error) {
      return "Not valid JSON: " + error.message;
    }
  }

  function showProblem(form, problem) {
    var textarea = form.querySelector("textarea[data-json-editor]");
    var output = form.querySelector(".json-error");
    if (textarea) {
      textarea.classList.toggle("is-danger", !!problem);
      textarea.setAttribute("aria-invalid", problem ? "true" : "false");
    }
    if (output) {
      output.textContent = problem || "";
      output.hidden = !problem;
    }
    if (problem) {
      var details = form.querySelector("details.edit-arguments");
      if (details) details.open = true;
      if (textarea) textarea.focus();
    }
  }

  function formProblem(form) {
    if (!form || !form.classList || !form.classList.contains("decision-form")) return null;
    return jsonProblem(form.querySelector("textarea[data-json-editor]"));
  }

  // htmx asks before it sends: veto a request carrying invalid JSON.
  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail && event.detail.elt;
    var problem = formProblem(form);
    if (problem) {
      event.preventDefault();
      showProblem(form, problem);
    }
  });

  // Without htmx (a plain form post) the same rule holds.
  document.addEventListener(
    "submit",
    function (event) {
      var problem = formProblem(event.target);
      if (problem) {
        event.preventDefault();
        event.stopImmediatePropagation();
        showProblem(event.target, problem);
      }
    },
    true
  );

  document.addEventListener("input", function (event) {
    if (event.target.matches && event.target.matches("textarea[data-json-editor]")) {
      showProblem(event.target.form, jsonProblem(event.target));
    }
  });

  // ---- masked values ---------------------------------------------------------------------
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.reveal-secret");
    if (!button) return;
    var secret = button.closest("[data-secret]");
    var mask = secret.querySelector(".secret-mask");
    var value = secret.querySelector(".secret-value");
    var reveal = value.hidden;
    value.hidden = !reveal;
    mask.hidden = reveal;
    button.textContent = reveal ? "hide" : "reveal";
  });

  // ---- countdowns --------------------------------------------------------------------------
  function format(seconds) {
    if (seconds <= 0) return "expired";
    var m = Math.floor(seconds / 60);
    var s = seconds % 60;
    return (m ? m + "m " : "") + s + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll(".countdown[data-expires-at]").forEach(function (node) {
      var left = Math.max(0, Math.round((Date.parse(node.dataset.expiresAt) - now) / 1000));
      node.textContent = format(left);
      node.classList.toggle("has-text-danger", left <= 60);
      var card = node.closest("article.approval-card");
      var extend = card && card.querySelector("form[data-extend]");
      if (extend) extend.hidden = !(left > 0 && left <= 60);
    });
  }

  tick();
  setInterval(tick, 1000);
})();
