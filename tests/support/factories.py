"""Factories for the personas and objects tests need."""

import factory
from django.utils import timezone

from approvals.models import Approval
from console.directory.services import api_key_create
from console.models import DEFAULT_ROLES, Principal, Role, Tenant
from runs.models import VERDICT_SEVERITY, Agent, Conversation, Run, RunTrace, TurnVerdict


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())

    @factory.post_generation
    def default_roles(self, create, extracted, **kwargs):
        for name, spec in DEFAULT_ROLES.items():
            Role.objects.get_or_create(tenant=self, name=name, defaults=spec)


class PrincipalFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Principal

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"person{n}@example.com")
    name = factory.Sequence(lambda n: f"Person {n}")

    @factory.post_generation
    def role(self, create, extracted, **kwargs):
        """`PrincipalFactory(role="reviewer")` gives the principal that tenant role."""
        if extracted:
            self.roles.add(Role.objects.get(tenant=self.tenant, name=extracted))

    @factory.post_generation
    def password(self, create, extracted, **kwargs):
        """`PrincipalFactory(password="...")` makes a login user named by the principal id."""
        if extracted:
            from django.contrib.auth import get_user_model

            user = get_user_model().objects.create_user(
                username=self.external_id, password=extracted
            )
            self.user = user
            self.save(update_fields=["user"])


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"agent-{n}")


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"conv-{n}")


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run
        skip_postgeneration_save = True  # the hooks add rows of their own, not fields

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"run_{n:06d}")
    agent = factory.SubFactory(AgentFactory, tenant=factory.SelfAttribute("..tenant"))
    agent_version = 1
    current_agent_id = factory.LazyAttribute(lambda o: o.agent.external_id)
    principal = factory.SubFactory(PrincipalFactory, tenant=factory.SelfAttribute("..tenant"))
    started_at = factory.LazyFunction(timezone.now)

    @factory.post_generation
    def verdicts(run, create, extracted, **kwargs):
        """`verdicts={turn: {verdict, guard, reason}}`: the verdicts the run's turns hold."""
        for turn, v in (extracted or {}).items():
            TurnVerdict.objects.create(
                run=run, turn=turn, severity=VERDICT_SEVERITY[v["verdict"]], **v
            )

    @factory.post_generation
    def trace_ids(run, create, extracted, **kwargs):
        """`trace_ids=[...]`: the run's trace ids, in order."""
        for trace_id in extracted or ():
            RunTrace.objects.create(run=run, trace_id=trace_id)


class ApprovalFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Approval

    run = factory.SubFactory(RunFactory)
    tenant = factory.LazyAttribute(lambda o: o.run.tenant)
    step = 1
    tool_call_id = factory.Sequence(lambda n: f"call_{n}")
    tool_name = "send_email"
    arguments = factory.LazyFunction(lambda: {"to": "bob@example.com", "subject": "Hi"})
    reason = "sending email needs a human"
    rejection_message = "The user declined to send this email."
    expires_at = factory.LazyFunction(lambda: timezone.now() + timezone.timedelta(minutes=15))


def make_key(tenant, *, scopes=("ingest",), principal=None, name="test key") -> str:
    """A raw API key for the tenant (the stored row keeps only its hash)."""
    _, raw = api_key_create(tenant=tenant, name=name, scopes=list(scopes), principal=principal)
    return raw
