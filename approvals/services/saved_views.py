"""The desk's saved views, the writes: a reviewer names the filter set it is looking at, renames
or deletes it. Each view is its acting principal's, in its tenant (`approvals.access`); the
filters arrive already read by the desk (`selectors_desk.desk_filters`, only the ones set)."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import SavedView
from console.core.errors import Conflict, Invalid
from console.directory.access import acting_principal

NAME_MAX = 80
MAX_VIEWS = 50  # saved views one principal keeps


def _name(raw) -> str:
    name = " ".join(str(raw or "").split())
    if not name or len(name) > NAME_MAX:
        raise Invalid(
            f"a view's name holds 1 to {NAME_MAX} characters",
            code="validation_error",
            details=[{"path": "name", "message": f"1 to {NAME_MAX} characters"}],
        )
    return name


def _taken(name: str) -> Conflict:
    return Conflict(f"you already have a view named '{name}'", code="saved_view_exists")


def saved_view_create(*, viewer, name, filters: dict) -> SavedView:
    """Save these filters under a name for this viewer (a runtime's key, acting as no one,
    may not)."""
    mine = approvals_access.saved_views_of(viewer=viewer)  # 403 before the name's 422
    name = _name(name)
    principal = acting_principal(viewer)
    if principal is None:
        raise Invalid("only a person may save a view", code="validation_error")
    if mine.count() >= MAX_VIEWS:
        raise Invalid(f"you may keep at most {MAX_VIEWS} saved views", code="validation_error")
    cleaned = {str(k): str(v) for k, v in (filters or {}).items() if v}
    try:
        with transaction.atomic():
            return SavedView.objects.create(
                tenant_id=viewer.tenant_id, principal=principal, name=name, filters=cleaned
            )
    except IntegrityError:
        raise _taken(name) from None


def saved_view_rename(*, view: SavedView, name) -> SavedView:
    name = _name(name)
    if name == view.name:
        return view
    view.name, view.updated_at = name, timezone.now()
    try:
        with transaction.atomic():
            view.save(update_fields=["name", "updated_at"])
    except IntegrityError:
        raise _taken(name) from None
    return view


def saved_view_delete(*, view: SavedView) -> None:
    view.delete()
