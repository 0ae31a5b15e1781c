"""Browser notifications in a real browser against a real daphne: with the permission granted
(`context.grant_permissions`), a console page that is not the inbox (here `/settings/`) shows a
system notification for a call held through the API, from the page's own socket, no polling;
clicking it opens the call's card. Observed through a wrapped `window.Notification`."""

from __future__ import annotations

import pytest

from tests.support.browser import shot, sign_in
from tests.support.browser_live import (
    HELD,
    PASSWORD,
    REVIEWER,
    admit,
    daphne,
    post,
    provision,
    runtime,
)
from tests.support.live_console import live_env

pytestmark = pytest.mark.browser

# Records every notification the page makes (and still makes the real one).
WRAP = """
(() => {
  const Real = window.Notification;
  window.__notes = [];
  function Recorded(title, options) {
    const entry = { title: title, body: (options || {}).body, tag: (options || {}).tag };
    window.__notes.push(entry);
    try {
      entry.note = new Real(title, options);
      return entry.note;
    } catch (error) {
      entry.error = String(error);
      return entry;
    }
  }
  Object.defineProperty(Recorded, "permission", { get: () => Real.permission });
  Recorded.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Recorded;
})();
"""


def test_a_new_call_shows_a_system_notification_that_opens_its_card(browser_context, tmp_path):
    env = live_env(tmp_path, "notifybrowser")
    key = provision(env)
    with daphne(env, tmp_path / "daphne.log") as url, runtime(url, key) as api:
        admit(api)
        browser_context.grant_permissions(["notifications"], origin=url)
        browser_context.add_init_script(WRAP)
        page = browser_context.new_page()
        page.set_default_timeout(10_000)
        page.base_url = url
        sign_in(page, REVIEWER, PASSWORD, next_path="/settings/")
        page.locator("#live-status[data-state=live]").wait_for()
        permission = page.locator("#browser-permission")
        assert permission.get_attribute("data-state") == "granted"
        assert permission.inner_text() == "This browser shows them."
        assert not page.locator("#browser-permission-ask").is_visible()  # nothing to ask
        shot(page, "settings")
        assert page.evaluate("window.__notes.length") == 0
        post(api, {**HELD, "seq": 1})
        page.wait_for_function("() => window.__notes.length > 0", timeout=5_000)
        page.wait_for_timeout(300)
        notes = page.evaluate("window.__notes.map(n => [n.title, n.body, n.tag, n.error || ''])")
        assert len(notes) == 1, notes  # one call, one notification
        title, body, tag, error = notes[0]
        assert title == "Decide: refund_payment" and error == ""
        assert body == "No reason given. (run run_live_browser for a@x.example)"
        approval_id = tag.removeprefix("gavel-")
        assert approval_id.startswith("apr_")
        page.evaluate("(window.__notes[0].note || window.__notes[0]).onclick()")
        page.wait_for_url(f"**/approvals/{approval_id}/")
        assert page.get_by_role("button", name="Approve").first.is_visible()
