// The reviewer's desk (/approvals/): a dense list of pending calls beside the whole card of the
// one in focus. Keyboard first: J/K move, A/D decide (the call in focus, or every selected
// call), E edits the message the model reads, X selects, Shift-X selects a range, Esc always
// leaves a text field (and then clears the selection), O opens the call's own page, ? shows the
// keys. After a decision the focus moves at once to the next pending call; the decision itself
// goes to POST /api/v1/approvals/decisions (each call its own decision, refusals per call).
// No inline JS (CSP: script-src 'self').
(function () {
  "use strict";

  var desk = document.querySelector("[data-desk]");
  if (!desk) return;
  var pane = document.getElementById("desk-pane");
  var statusNode = document.getElementById("desk-status");
  var bulkBar = document.getElementById("desk-bulk");
  var selected = new Set();
  var anchor = null; // the last row selected with X (Shift-X selects from it)
  var cache = new Map(); // approval id -> card HTML (the next calls', fetched ahead)
  var currentId = null;
  var mine = new Set(); // calls decided from this page with the keys (the focus moves on)
  var fromForm = new Set(); // calls this page sent a decision for through the pane's own form
  var currentIndex = 0;
  var narrow = window.matchMedia("(max-width: 899px)");

  function list() {
    return document.getElementById("desk-rows");
  }
  function rows() {
    var ol = list();
    return ol ? Array.prototype.slice.call(ol.querySelectorAll("li.desk-row")) : [];
  }
  function rowOf(id) {
    return id ? document.getElementById("desk-row-" + id) : null;
  }
  function current() {
    return rowOf(currentId);
  }
  function csrf() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (error) {
      return "";
    }
  }
  function say(text) {
    statusNode.textContent = text;
  }

  // ---- the card in the pane ----------------------------------------------------------------
  function fetchCard(id) {
    if (cache.has(id)) return cache.get(id);
    var promise = fetch("/approvals/" + encodeURIComponent(id) + "/", {
      headers: { "HX-Request": "true" },
      credentials: "same-origin",
    }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.text();
    });
    promise.catch(function () {
      cache.delete(id);
    });
    cache.set(id, promise);
    return promise;
  }

  function paneShows(id) {
    var card = pane.querySelector("article.approval-card");
    return card && card.getAttribute("data-approval-id") === id;
  }

  function showCard(id) {
    if (!id || narrow.matches) return;
    if (paneShows(id)) return;
    var text = cache.get(id);
    if (text && text.resolved !== undefined) {
      put(id, text.resolved);
      return;
    }
    fetchCard(id).then(function (html) {
      if (currentId === id) put(id, html);
    }, function () {
      if (currentId === id) pane.innerHTML = '<p class="desk-pane-empty">This call could not be loaded.</p>';
    });
  }

  // What a reviewer typed into a card (the message, edited arguments) survives moving away
  // and back: kept per call while the page lives.
  var drafts = new Map();
  function keepDraft() {
    var card = pane.querySelector("article.approval-card");
    if (!card) return;
    var fields = {};
    card.querySelectorAll("textarea").forEach(function (box) {
      if (box.value !== box.defaultValue) fields[box.name] = box.value;
    });
    var id = card.getAttribute("data-approval-id");
    if (Object.keys(fields).length) drafts.set(id, fields);
    else drafts.delete(id);
  }
  function restoreDraft(id) {
    var fields = drafts.get(id);
    if (!fields) return;
    pane.querySelectorAll("textarea").forEach(function (box) {
      if (fields[box.name] !== undefined) box.value = fields[box.name];
    });
  }

  function put(id, html) {
    keepDraft();
    pane.innerHTML = html;
    htmx.process(pane);
    restoreDraft(id);
    cache.delete(id); // shown now: the live socket keeps it current from here
  }

  function prefetch(row) {
    for (var i = 0; i < 2 && row; i++) {
      row = nextRow(row);
      if (!row) break;
      var id = row.getAttribute("data-approval-id");
      if (!cache.has(id)) {
        (function (id) {
          var promise = fetchCard(id);
          promise.then(function (html) {
            promise.resolved = html;
          }, function () {});
        })(id);
      }
    }
  }

  function nextRow(row) {
    var el = row.nextElementSibling;
    while (el && !el.classList.contains("desk-row")) el = el.nextElementSibling;
    return el;
  }
  function prevRow(row) {
    var el = row.previousElementSibling;
    while (el && !el.classList.contains("desk-row")) el = el.previousElementSibling;
    return el;
  }

  // ---- focus -------------------------------------------------------------------------------
  function focusRow(row, options) {
    if (!row) return;
    var old = current();
    if (old && old !== row) {
      old.setAttribute("tabindex", "-1");
      old.removeAttribute("aria-current");
    }
    currentId = row.getAttribute("data-approval-id");
    currentIndex = rows().indexOf(row);
    row.setAttribute("tabindex", "0");
    row.setAttribute("aria-current", "true");
    if (!(options && options.keepFocus)) row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
    showCard(currentId);
    prefetch(row);
    maybeLoadMore(row);
  }

  // Focus is never lost: when the row in focus leaves (decided here or elsewhere, expired),
  // the call now at its place takes it (else the last one).
  // The pane's card when it shows a call decided through its own form or elsewhere (not by
  // the keys here, which move on), else null: an empty list leaves that card where it is.
  function decidedCard() {
    var card = pane.querySelector("article.approval-card");
    if (!card || card.getAttribute("data-status") === "pending") return null;
    return mine.has(card.getAttribute("data-approval-id")) ? null : card;
  }

  // The call in the pane was decided (its row left the list): say how, from its card. Through
  // the pane's own form it was decided here; otherwise elsewhere (another reviewer, a rule, the
  // API). A form whose decision lost the race to another's shows that other's decision: the
  // card names who decided, so the line stays true.
  function announceDecided(id) {
    var card = decidedCard();
    if (!card || card.getAttribute("data-approval-id") !== id) return false;
    var who = card.querySelector(".decided-by, .decided-by-rule");
    var tool = card.querySelector(".tool-name");
    say((tool ? tool.textContent + ": " : "") + card.getAttribute("data-status") +
      (who ? " by " + who.textContent : "") + (fromForm.has(id) ? "." : ", elsewhere."));
    return true;
  }

  function ensureFocus() {
    var all = rows();
    if (current()) {
      currentIndex = all.indexOf(current());
      return;
    }
    var announced = currentId && announceDecided(currentId);
    if (!all.length) {
      // The pane keeps the card that says who decided it, through every later frame too.
      var kept = announced || (!currentId && decidedCard() !== null);
      currentId = null;
      if (kept) return;
      pane.innerHTML = '<p class="desk-pane-empty">Nothing waits for you. New calls appear here the moment they arrive.</p>';
      var heading = desk.querySelector("h1");
      if (heading) {
        heading.setAttribute("tabindex", "-1");
        heading.focus();
      }
      maybeLoadMore(null);
      return;
    }
    var inDesk = desk.contains(document.activeElement) || document.activeElement === document.body;
    focusRow(all[Math.min(currentIndex, all.length - 1)], { keepFocus: !inDesk });
  }

  function move(step) {
    var row = current();
    if (!row) return ensureFocus();
    var next = step > 0 ? nextRow(row) : prevRow(row);
    if (next) focusRow(next);
    else if (step > 0) maybeLoadMore(row, true);
  }

  // The next keyset page is fetched when the focus comes near the end of the loaded rows.
  function maybeLoadMore(row, now) {
    var more = document.querySelector("#desk-more [data-desk-more]");
    if (!more || more.getAttribute("data-loading")) return;
    var all = rows();
    var left = row ? all.length - 1 - all.indexOf(row) : 0;
    if (now || left < 10) {
      more.setAttribute("data-loading", "1");
      htmx.trigger(more, "click");
    }
  }

  // ---- selection ---------------------------------------------------------------------------
  function setSelected(row, on) {
    var id = row.getAttribute("data-approval-id");
    var box = row.querySelector("input.desk-check");
    if (!box) return;
    box.checked = on;
    row.classList.toggle("is-selected", on);
    if (on) selected.add(id);
    else selected.delete(id);
  }

  function updateBulk() {
    for (var id of Array.from(selected)) if (!rowOf(id)) selected.delete(id);
    bulkBar.hidden = selected.size === 0;
    bulkBar.querySelector("[data-desk-selected]").textContent = selected.size + " selected";
  }

  function toggle(row, range) {
    if (!row || !row.querySelector("input.desk-check")) return;
    if (range && anchor && rowOf(anchor)) {
      var all = rows();
      var a = all.indexOf(rowOf(anchor));
      var b = all.indexOf(row);
      for (var i = Math.min(a, b); i <= Math.max(a, b); i++) setSelected(all[i], true);
    } else {
      setSelected(row, !selected.has(row.getAttribute("data-approval-id")));
    }
    anchor = row.getAttribute("data-approval-id");
    updateBulk();
  }

  function clearSelection() {
    rows().forEach(function (row) {
      if (selected.has(row.getAttribute("data-approval-id"))) setSelected(row, false);
    });
    selected.clear();
    updateBulk();
  }

  // ---- deciding ----------------------------------------------------------------------------
  function paneMessage(id) {
    if (!paneShows(id)) return null;
    var box = pane.querySelector("textarea.decision-message");
    return box ? box.value : null;
  }

  function countBy(delta, at) {
    var node = document.getElementById("desk-count");
    if (!node) return;
    // As of the decisions just made (the server's decidedAt): older frames' counts are stale.
    if (at && at > Number(node.getAttribute("data-at") || 0)) node.setAttribute("data-at", at);
    var n = Math.max(0, parseInt(node.getAttribute("data-count") || "0", 10) + delta);
    node.setAttribute("data-count", n);
    node.textContent = node.textContent.replace(/^\d+/, String(n));
  }

  function decide(decision) {
    if (list().getAttribute("data-decides") !== "1") return;
    var ids = selected.size ? Array.from(selected) : currentId ? [currentId] : [];
    if (!ids.length) return;
    var body = { decision: decision, approvalIds: ids };
    if (ids.length === 1 && decision === "deny") {
      var message = paneMessage(ids[0]);
      if (message === null && drafts.has(ids[0])) message = drafts.get(ids[0]).message;
      if (message !== null && message !== undefined) body.message = message;
    }
    // Move on at once: the focus goes to the first call after the decided ones that stays.
    var all = rows();
    var leaving = new Set(ids);
    var last = Math.max.apply(null, ids.map(function (id) { return all.indexOf(rowOf(id)); }));
    var next = null;
    for (var i = last + 1; i < all.length && !next; i++) {
      if (!leaving.has(all[i].getAttribute("data-approval-id"))) next = all[i];
    }
    for (var j = last - 1; j >= 0 && !next; j--) {
      if (!leaving.has(all[j].getAttribute("data-approval-id"))) next = all[j];
    }
    ids.forEach(function (id) {
      mine.add(id);
      var row = rowOf(id);
      if (row) {
        row.classList.add("is-deciding");
        row.hidden = true;
      }
    });
    if (next) focusRow(next);
    else {
      // Nothing loaded stays after them (the next page may still be arriving): the focus goes
      // to whatever takes the first decided row's place, not to the end of the list.
      var places = ids.map(function (id) { return all.indexOf(rowOf(id)); })
        .filter(function (i) { return i >= 0; });
      if (places.length) currentIndex = Math.min.apply(null, places);
    }
    clearSelection();
    say((decision === "approve" ? "Approving " : "Denying ") + ids.length + (ids.length === 1 ? " call…" : " calls…"));
    fetch("/api/v1/approvals/decisions", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify(body),
    })
      .then(function (response) {
        return response.json().then(function (data) {
          return { ok: response.ok, data: data };
        });
      })
      .then(function (answer) {
        if (!answer.ok) {
          var error = (answer.data && answer.data.error) || {};
          ids.forEach(function (id) { refused(id, error.message || "not decided"); });
          say("Nothing was decided: " + (error.message || "the server refused"));
          return;
        }
        settle(answer.data, decision);
      })
      .catch(function () {
        ids.forEach(function (id) { refused(id, "not sent: the connection failed; try again"); });
        say("Nothing was decided: the connection failed.");
      });
  }

  function settle(data, decision) {
    var done = 0;
    var lost = [];
    var refusedCount = 0;
    data.results.forEach(function (r) {
      if (r.status === 200) {
        done += 1;
        drop(r.approvalId);
      } else if (r.status === 409) {
        lost.push(r);
        drop(r.approvalId); // decided elsewhere: it leaves the list as well
      } else {
        refusedCount += 1;
        refused(r.approvalId, r.error ? r.error.message : "refused");
      }
    });
    var latest = 0;
    data.results.forEach(function (r) {
      var when = r.approval && r.approval.decidedAt ? Date.parse(r.approval.decidedAt) * 1000 : 0;
      if (when > latest) latest = when;
    });
    countBy(-(done + lost.length), latest);
    var parts = [];
    if (done) parts.push((decision === "approve" ? "Approved " : "Denied ") + done + (done === 1 ? " call" : " calls"));
    if (lost.length) {
      parts.push(lost.length + " decided already" + (lost.length === 1 && lost[0].error ? " (" + lost[0].error.message + ")" : ""));
    }
    if (refusedCount) parts.push(refusedCount + " refused (shown on each)");
    say(parts.join(" · ") + ".");
    ensureFocus();
  }

  function drop(id) {
    drafts.delete(id);
    var row = rowOf(id);
    if (row) row.remove();
    cache.delete(id);
    selected.delete(id);
  }

  function refused(id, message) {
    var row = rowOf(id);
    if (!row) return;
    row.hidden = false;
    row.classList.remove("is-deciding");
    row.classList.add("is-refused");
    var note = row.querySelector(".desk-row-error");
    note.textContent = message.charAt(0).toUpperCase() + message.slice(1);
    note.hidden = false;
  }

  // ---- keys ----------------------------------------------------------------------------------
  function typing(target) {
    var tag = (target && target.tagName) || "";
    return tag === "TEXTAREA" || tag === "INPUT" || tag === "SELECT" || (target && target.isContentEditable);
  }

  var keysDialog = document.getElementById("desk-keys");
  function showKeys() {
    if (keysDialog && !keysDialog.open) keysDialog.showModal();
  }

  document.addEventListener(
    "keydown",
    function (event) {
      if (keysDialog && keysDialog.open) return; // the dialog's own Esc closes it
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      if (typing(event.target)) {
        if (event.key === "Escape") {
          event.preventDefault();
          event.stopPropagation();
          event.target.blur();
          var row = current();
          if (row) row.focus({ preventScroll: true });
        }
        return;
      }
      if (event.target.closest && event.target.closest("form.decision-form details")) return;
      var key = event.key;
      if (key === "j" || key === "J" || key === "ArrowDown") move(1);
      else if (key === "k" || key === "K" || key === "ArrowUp") move(-1);
      else if (key === "a" || key === "A") decide("approve");
      else if (key === "d" || key === "D") decide("deny");
      else if ((key === "x" || key === "X") && current()) toggle(current(), event.shiftKey);
      else if (key === "e" || key === "E") {
        if (!currentId || !paneShows(currentId)) return;
        var box = pane.querySelector("textarea.decision-message");
        if (!box) return;
        box.focus();
        box.select();
      } else if (key === "o" || key === "O") {
        if (currentId) window.location.assign("/approvals/" + encodeURIComponent(currentId) + "/");
      } else if (key === "?") showKeys();
      else if (key === "Escape") {
        if (!selected.size) return;
        clearSelection();
      } else return;
      event.preventDefault();
      event.stopPropagation(); // the run page's card keys (inbox.js) are not the desk's
    },
    true
  );

  // ---- mouse -------------------------------------------------------------------------------
  desk.addEventListener("click", function (event) {
    var target = event.target;
    if (target.closest("[data-desk-keys-open]")) return showKeys();
    var bulk = target.closest("[data-desk-bulk]");
    if (bulk) return decide(bulk.getAttribute("data-desk-bulk"));
    if (target.closest("[data-desk-clear]")) return clearSelection();
    var row = target.closest("li.desk-row");
    if (!row) return;
    if (target.matches("input.desk-check")) {
      setSelected(row, !target.checked ? false : true);
      anchor = row.getAttribute("data-approval-id");
      updateBulk();
      focusRow(row);
      return;
    }
    var link = target.closest("a.desk-open");
    if (link && (event.ctrlKey || event.metaKey || event.shiftKey || narrow.matches)) return;
    if (link) event.preventDefault();
    focusRow(row);
  });

  desk.addEventListener("change", function (event) {
    if (event.target.matches("select[data-autosubmit]")) event.target.form.submit();
  });

  // ---- htmx: pages of rows, live rows, the pane's own forms ----------------------------------
  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.detail && event.detail.elt;
    if (!form || !form.matches || !form.matches("form.decision-form") || !pane.contains(form)) return;
    var card = form.closest("article.approval-card");
    if (card) fromForm.add(card.getAttribute("data-approval-id"));
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && pane.contains(target)) {
      var card = pane.querySelector("article.approval-card");
      if (card && card.getAttribute("data-status") !== "pending") {
        var id = card.getAttribute("data-approval-id");
        if (rowOf(id)) {
          say("Call " + card.getAttribute("data-status") + ".");
          drop(id);
          countBy(-1);
        }
      }
    }
    if (!current() || !desk.contains(document.activeElement)) scheduleEnsure();
    else currentIndex = rows().indexOf(current());
  });

  // A live frame swaps several parts (rows leave, the pane's card changes, the count): the
  // focus is settled once the whole frame is in.
  var ensureTimer = null;
  function scheduleEnsure() {
    if (ensureTimer) return;
    ensureTimer = window.setTimeout(function () {
      ensureTimer = null;
      ensureFocus();
    }, 0);
  }
  document.addEventListener("htmx:oobAfterSwap", scheduleEnsure);

  // Counts: frames of different events render concurrently and may arrive out of order; each
  // count says when its read began (data-at, microseconds): an older one never replaces a newer.
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || target.id !== "desk-count") return;
    var incoming = event.detail.fragment.querySelector
      ? event.detail.fragment.querySelector("#desk-count")
      : null;
    var newer = incoming ? Number(incoming.getAttribute("data-at") || 0) : 0;
    if (newer && newer < Number(target.getAttribute("data-at") || 0)) event.preventDefault();
  });

  desk.addEventListener("gavel:live-resync", function () {
    cache.clear();
  });

  var first = rows()[0];
  if (first) focusRow(first, { keepFocus: !!window.location.hash });
})();
