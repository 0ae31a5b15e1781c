"""Deciding, expiring, extending and marking pickups: the services behind every path."""

from unittest import mock

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.decisions import (
    approval_decide,
    approval_extend,
    approvals_mark_delivered,
)
from approvals.services.expiry import approvals_expire_due
from console.core.errors import Conflict, Forbidden, Invalid, NotFound
from console.models import AuditEvent, Role
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def approval(tenant_a):
    return ApprovalFactory(run=RunFactory(tenant=tenant_a))


def decisions_audited(approval):
    return AuditEvent.objects.filter(
        object_type="approval", object_id=approval.public_id, action="approval.decided"
    )


def test_deny_records_the_message_the_model_reads_and_one_audit_row(approval, reviewer_a):
    decided = approval_decide(
        approval=approval, viewer=reviewer_a, decision="deny", message="Not this one, Bob."
    )
    assert decided.status == ApprovalStatus.DENIED
    assert decided.message == "Not this one, Bob."
    assert decided.decided_by == reviewer_a
    assert decided.decision_seq == 1
    assert decisions_audited(approval).get().actor_principal == reviewer_a


def test_deny_without_message_uses_the_rejection_message(approval, reviewer_a):
    decided = approval_decide(approval=approval, viewer=reviewer_a, decision="deny")
    assert decided.message == approval.rejection_message


def test_approve_with_edited_arguments_keeps_them_for_the_runtime(approval, reviewer_a):
    edited = {"to": "carol@example.com", "subject": "Hi"}
    decided = approval_decide(
        approval=approval, viewer=reviewer_a, decision="approve", arguments=edited
    )
    assert decided.status == ApprovalStatus.APPROVED
    assert decided.decided_arguments == edited
    assert decided.arguments == {"to": "bob@example.com", "subject": "Hi"}  # the request stays


def test_approve_without_edit_runs_the_requested_arguments(approval, reviewer_a):
    decided = approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert decided.decided_arguments == approval.arguments


def test_the_second_decision_is_a_conflict_naming_the_winner(approval, reviewer_a, lead_a):
    approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    stale = Approval.objects.get(pk=approval.pk)
    stale.status = ApprovalStatus.PENDING  # as a racing request read it
    with pytest.raises(Conflict) as err:
        approval_decide(approval=stale, viewer=lead_a, decision="deny")
    assert err.value.details == {"decidedBy": "reviewer@a.example", "status": "approved"}
    assert decisions_audited(approval).count() == 1
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED


def test_decisions_publish_on_commit(approval, reviewer_a, django_capture_on_commit_callbacks):
    from unittest import mock

    with (
        mock.patch("console.live.realtime._send") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    messages = [call.args[1] for call in send.call_args_list]
    assert {m["type"] for m in messages} == {"approvals.updated"}
    assert messages[0]["approvals"] == [approval.public_id]
    assert messages[0]["change"] == "approved"


def test_the_runtimes_wake_goes_out_before_the_audit_chain_is_sealed(
    approval, reviewer_a, django_capture_on_commit_callbacks
):
    # On commit the publish that wakes the runtime's long-poll runs first; sealing the audit
    # entry into the tenant's chain (a short transaction of its own) comes after it.
    from unittest import mock

    from console.audit import log as auditlog

    order = []
    real_seal = auditlog.audit_seal
    with (
        mock.patch("console.live.realtime._send", side_effect=lambda *a: order.append("publish")),
        mock.patch.object(
            auditlog,
            "audit_seal",
            side_effect=lambda **kw: order.append("seal") or real_seal(**kw),
        ),
        django_capture_on_commit_callbacks(execute=True),
    ):
        approval_decide(approval=approval, viewer=reviewer_a, decision="deny")
    assert order[0] == "publish" and "seal" in order
    assert AuditEvent.objects.get(action="approval.decided").hash  # sealed all the same


def test_a_call_whose_expiry_passes_after_it_was_read_is_expired_not_decided(approval, reviewer_a):
    # Read while open (as the request did), then its expiry passes before the decision lands.
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timezone.timedelta(seconds=1)
    )
    assert approval.expires_at > timezone.now()  # the stale copy still says open
    with pytest.raises(Conflict) as err:
        approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert err.value.details == {"decidedBy": None, "status": "expired"}
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED
    assert not decisions_audited(approval).exists()


def test_a_viewer_may_not_decide(approval, viewer_a):
    with pytest.raises(Forbidden):
        approval_decide(approval=approval, viewer=viewer_a, decision="approve")
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_a_role_whose_globs_miss_the_tool_may_not_decide(approval, tenant_a):
    role = Role.objects.create(
        tenant=tenant_a, name="db-only", capabilities=["view_runs", "decide"], decide_tools=["db_*"]
    )
    person = PrincipalFactory(tenant=tenant_a)
    person.roles.add(role)
    with pytest.raises(Forbidden, match="send_email"):
        approval_decide(approval=approval, viewer=person, decision="approve")


def test_no_one_decides_a_call_of_their_own_run(tenant_a, reviewer_a):
    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    with pytest.raises(Forbidden, match="themselves"):
        approval_decide(approval=own, viewer=reviewer_a, decision="approve")


def test_self_approval_when_the_tenant_allows_it(tenant_a, reviewer_a):
    tenant_a.allow_self_approval = True
    tenant_a.save()
    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    assert approval_decide(approval=own, viewer=reviewer_a, decision="approve").status == (
        ApprovalStatus.APPROVED
    )


def test_another_tenants_decider_gets_not_found(approval, reviewer_b):
    with pytest.raises(NotFound):
        approval_decide(approval=approval, viewer=reviewer_b, decision="approve")


def test_a_decide_key_decides_as_its_principal(approval, tenant_a, reviewer_a):
    from console.models import ApiKey

    make_key(tenant_a, scopes=("decide",), principal=reviewer_a, name="bot")
    key = ApiKey.objects.get(name="bot")
    decided = approval_decide(approval=approval, viewer=key, decision="approve")
    assert decided.decided_by == reviewer_a
    assert decided.decided_via_key == key
    assert decisions_audited(approval).get().actor_key == key


def test_arguments_only_with_approve_and_bad_decisions_change_nothing(approval, reviewer_a):
    with pytest.raises(Invalid):
        approval_decide(approval=approval, viewer=reviewer_a, decision="deny", arguments={})
    with pytest.raises(Invalid):
        approval_decide(approval=approval, viewer=reviewer_a, decision="maybe")
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert not decisions_audited(approval).exists()


def test_decision_cursors_increase_per_run(tenant_a, reviewer_a):
    run = RunFactory(tenant=tenant_a)
    first, second = ApprovalFactory(run=run), ApprovalFactory(run=run)
    approval_decide(approval=second, viewer=reviewer_a, decision="approve")
    approval_decide(approval=first, viewer=reviewer_a, decision="deny")
    assert Approval.objects.get(pk=second.pk).decision_seq == 1
    assert Approval.objects.get(pk=first.pk).decision_seq == 2


def test_expiry_fails_closed_with_the_rejection_message_and_is_audited(approval):
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    assert approvals_expire_due() == 1
    expired = Approval.objects.get(pk=approval.pk)
    assert expired.status == ApprovalStatus.EXPIRED
    assert expired.message == approval.rejection_message
    assert expired.decided_by is None
    assert expired.decided_arguments is None
    assert AuditEvent.objects.filter(action="approval.expired", object_id=approval.public_id)
    assert approvals_expire_due() == 0


def test_a_call_past_expiry_cannot_be_approved(approval, reviewer_a):
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timezone.timedelta(seconds=1)
    )
    approval.refresh_from_db()
    with pytest.raises(Conflict) as err:
        approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert err.value.details == {"decidedBy": None, "status": "expired"}
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED


def test_extend_once_in_the_last_minute(approval, reviewer_a):
    with pytest.raises(Conflict, match="last minute"):
        approval_extend(approval=approval, viewer=reviewer_a)
    soon = timezone.now() + timezone.timedelta(seconds=30)
    Approval.objects.filter(pk=approval.pk).update(expires_at=soon)
    approval.refresh_from_db()
    extended = approval_extend(approval=approval, viewer=reviewer_a)
    assert extended.expires_at > soon + timezone.timedelta(minutes=10)
    assert extended.extended_by == reviewer_a
    Approval.objects.filter(pk=approval.pk).update(expires_at=soon)
    extended.refresh_from_db()
    with pytest.raises(Conflict, match="once"):
        approval_extend(approval=extended, viewer=reviewer_a)


def test_a_viewer_may_not_extend(approval, viewer_a):
    with pytest.raises(Forbidden):
        approval_extend(approval=approval, viewer=viewer_a)


def test_mark_delivered_only_touches_decided_undelivered_calls(tenant_a, reviewer_a):
    run = RunFactory(tenant=tenant_a)
    decided, waiting = ApprovalFactory(run=run), ApprovalFactory(run=run)
    approval_decide(approval=decided, viewer=reviewer_a, decision="approve")
    assert approvals_mark_delivered(run=run) == [decided.public_id]
    assert Approval.objects.get(pk=decided.pk).delivered_at is not None
    assert Approval.objects.get(pk=waiting.pk).delivered_at is None
    assert approvals_mark_delivered(run=run) == []


def test_deciding_a_mirror_decides_the_childs_call_too(tenant_a, reviewer_a):
    child = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_call_id="c1")
    parent_run = RunFactory(tenant=tenant_a)
    mirror = ApprovalFactory(
        run=parent_run, tool_call_id="c1", sub_run_tool_call_id="sub1", mirror_of=child
    )
    approval_decide(approval=mirror, viewer=reviewer_a, decision="deny", message="no")
    child.refresh_from_db()
    assert child.status == ApprovalStatus.DENIED
    assert child.message == "no"
    assert child.decided_by == reviewer_a
    with pytest.raises(Conflict):
        approval_decide(approval=child, viewer=reviewer_a, decision="approve")


@pytest.mark.parametrize("which", ["child", "mirror", "plain"])
def test_a_decider_read_approval_decides_its_mirrors_without_looking_when_it_has_none(
    tenant_a, reviewer_a, which
):
    """approvals.access.approval_for_decider reads whether an approval has mirrors with it:
    deciding a call that has some (or mirrors one) decides them all; a plain call costs no mirror
    query."""
    from approvals import access as approvals_access
    from console.models import Principal

    child = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_call_id="c1")
    mirror = ApprovalFactory(
        run=RunFactory(tenant=tenant_a),
        tool_call_id="c1",
        sub_run_tool_call_id="s",
        mirror_of=child,
    )
    plain = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_call_id="c2")
    target = {"child": child, "mirror": mirror, "plain": plain}[which]
    viewer = Principal.objects.get(pk=reviewer_a.pk)
    read = approvals_access.approval_for_decider(viewer=viewer, approval_id=target.public_id)
    assert read.mirrored is (which == "child")
    from approvals.services import settle

    with mock.patch.object(
        settle.Approval.objects, "with_run", wraps=settle.Approval.objects.with_run
    ) as looked:
        approval_decide(approval=read, viewer=viewer, decision="deny", message="no")
    assert looked.called is (which != "plain")
    statuses = {
        a.pk: a.status for a in Approval.objects.filter(pk__in=[child.pk, mirror.pk, plain.pk])
    }
    decided = {"child": {child.pk, mirror.pk}, "mirror": {child.pk, mirror.pk}, "plain": {plain.pk}}
    assert {pk for pk, s in statuses.items() if s == ApprovalStatus.DENIED} == decided[which]


def test_the_expire_approvals_command_sweeps_once(approval):
    from io import StringIO

    from django.core.management import call_command

    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    out = StringIO()
    call_command("expire_approvals", stdout=out)
    assert "expired 1 approvals" in out.getvalue()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED


def test_the_expire_approvals_command_refuses_a_bad_interval(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="interval"):
        call_command("expire_approvals", "--loop", "--interval", "0")
