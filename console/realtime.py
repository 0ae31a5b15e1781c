"""The only publisher to the channel layer. Services call `publish_on_commit`; nothing else
touches the layer. Messages are small dicts of ids and facts, never HTML, never content."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def run_group(tenant_id: int, run_id: str) -> str:
    # Group names allow only ASCII alphanumerics, hyphens, underscores and periods (< 100 chars).
    import hashlib

    digest = hashlib.sha1(run_id.encode()).hexdigest()[:20]  # noqa: S324 - a name, not a secret
    return f"run.{tenant_id}.{digest}"


def inbox_group(tenant_id: int) -> str:
    return f"inbox.{tenant_id}"


def runlist_group(tenant_id: int) -> str:
    return f"runs.{tenant_id}"


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # the layer is lossy by design: a lost hint delays, never loses
        log.warning("channel layer publish to %s failed", group, exc_info=True)


def publish_on_commit(groups: list[str], message: dict) -> None:
    """Send `message` to each group once the current transaction commits."""

    def send():
        for group in groups:
            _send(group, message)

    transaction.on_commit(send)


# What services call (on commit). Consumers decide what to re-render from these facts.
def run_changed(*, run, what: list[str]) -> None:
    """A run's stored state moved: `what` names the parts (steps, messages, header, usage,
    todos, verdicts, approvals, status). Carries the run's lastSeq so clients can spot a gap."""
    message = {
        "type": "run.updated",
        "tenant": run.tenant_id,
        "run": run.external_id,
        "seq": run.last_seq,
        "what": sorted(set(what)),
    }
    publish_on_commit(
        [run_group(run.tenant_id, run.external_id), runlist_group(run.tenant_id)], message
    )


def approvals_changed(*, run, approval_ids: list[str], change: str) -> None:
    """Approvals of a run were requested, decided, expired or cancelled (`change`)."""
    message = {
        "type": "approvals.updated",
        "tenant": run.tenant_id,
        "run": run.external_id,
        "seq": run.last_seq,
        "approvals": list(approval_ids),
        "change": change,
    }
    publish_on_commit(
        [inbox_group(run.tenant_id), run_group(run.tenant_id, run.external_id)], message
    )
