"""The directory: tenants, principals, roles, teams, API keys; and the audit log."""

import hashlib
import secrets

from django.conf import settings
from django.db import connections, models
from django.utils import timezone

from console.core import auditchain
from console.core.rows import bulk_insert

CAPABILITIES = ("view_runs", "decide", "view_budgets", "manage_budgets", "manage_rules", "admin")
# `ingest`: write runs, read decisions; `decide`: decide as the bound principal; `manage`: the
# management API, acting as the bound principal (under its roles' capabilities).
# `scim`: SCIM 2.0 provisioning (/scim/v2/), bound to no principal.
SCOPES = ("ingest", "decide", "manage", "scim", "mcp")
# Scopes that make a key act as a principal: such a key is always bound to one.
PRINCIPAL_SCOPES = ("decide", "manage", "mcp")  # mcp: the gateway (gateway/)

# Every new tenant gets these (the contract's defaults). `admin` implies every capability.
DEFAULT_ROLES = {
    "admin": {"capabilities": list(CAPABILITIES), "decide_tools": ["*"]},
    "lead": {
        "capabilities": ["view_runs", "decide", "view_budgets", "manage_budgets", "manage_rules"],
        "decide_tools": ["*"],
    },
    "reviewer": {"capabilities": ["view_runs", "decide"], "decide_tools": ["*"]},
    "viewer": {"capabilities": ["view_runs"], "decide_tools": []},
}


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    allow_self_approval = models.BooleanField(default=False)
    approval_ttl_seconds = models.PositiveIntegerField(default=15 * 60)
    currency = models.CharField(max_length=3, default="USD")
    time_zone = models.CharField(max_length=64, default="UTC")
    # Notifications (contract v1.1): re-notify deciders / escalate to leads after these delays.
    reminder_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    escalate_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Slack: the signing secret (write-only on the wire) and whether Slack may decide.
    slack_signing_secret = models.CharField(max_length=200, blank=True)
    slack_decisions = models.CharField(max_length=8, default="link")  # link | decide
    # Audit retention in days; None keeps every entry forever.
    audit_retention_days = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return self.slug


class Team(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="teams")
    name = models.CharField(max_length=100)
    # Leads are members too (Principal.teams); they hear of escalations and team budgets.
    leads = models.ManyToManyField("Principal", blank=True, related_name="led_teams")
    # SCIM's `externalId`: the provisioning client's own identifier for the group.
    scim_external_id = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="team_unique_name")]

    def __str__(self):
        return f"{self.tenant.slug}/{self.name}"


class Role(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="roles")
    name = models.CharField(max_length=100)
    capabilities = models.JSONField(default=list)  # subset of CAPABILITIES
    decide_tools = models.JSONField(
        default=list
    )  # fnmatch globs of tool names this role may decide
    slack_decide = models.BooleanField(default=True)  # may decide its tools from Slack
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="role_unique_name")]

    def __str__(self):
        return f"{self.tenant.slug}/{self.name}"


class Principal(models.Model):
    """An identity runs are for; optionally a person who signs in (`user`). One login may be
    the principal of the same id in several tenants (at most one per tenant); the session
    says which of them the person acts as (console/access.py `principal_for_user`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="principals")
    external_id = models.CharField(max_length=255)  # the wire's principalId
    name = models.CharField(max_length=200, blank=True)
    email = models.EmailField(blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="principals",
    )
    roles = models.ManyToManyField(Role, blank=True, related_name="principals")
    teams = models.ManyToManyField(Team, blank=True, related_name="principals")
    is_active = models.BooleanField(default=True)
    # False for principals registered on first sight by a runtime, until an admin reviews them.
    reviewed = models.BooleanField(default=True)
    # SCIM's `externalId`: the provisioning client's own identifier for the user.
    scim_external_id = models.CharField(max_length=255, blank=True, default="")
    # Set by SCIM's DELETE: the principal is kept (deactivated; history names it) but SCIM
    # answers 404 for it and lists it nowhere, until a POST of its userName brings it back.
    scim_deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # /manage/principals/'s "not yet reviewed" queue: the few among every principal
            models.Index(
                fields=["tenant", "id"],
                name="principal_unreviewed",
                condition=models.Q(reviewed=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="principal_unique_id"),
            models.UniqueConstraint(fields=["tenant", "user"], name="principal_unique_user"),
        ]

    def __str__(self):
        return self.external_id


def _hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKeyQuerySet(models.QuerySet):
    def for_raw_key(self, raw: str):
        """The live key for a bearer token, or None (revoked, or past its `expires_at`). Keys
        are stored as SHA-256 only."""
        live = models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        try:  # key_hash is unique: no ORDER BY (`first()`'s) to compile and run
            return self.select_related("tenant", "principal").get(
                live, key_hash=_hash_key(raw), revoked_at__isnull=True
            )
        except self.model.DoesNotExist:
            return None


def new_key_id() -> str:
    return "key_" + secrets.token_hex(12)


class ApiKey(models.Model):
    PREFIX = "gvl_"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    public_id = models.CharField(max_length=32, unique=True, default=new_key_id)  # the wire id
    name = models.CharField(max_length=200)
    key_hash = models.CharField(max_length=64, unique=True)
    key_prefix = models.CharField(max_length=16)  # shown in the console to tell keys apart
    scopes = models.JSONField(default=list)  # subset of SCOPES
    principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="api_keys"
    )
    rate_per_minute = models.PositiveIntegerField(null=True, blank=True)  # None: the default
    rate_burst = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # past it the key is 401
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    def __str__(self):
        return f"{self.key_prefix}… ({self.name})"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        """A new raw key, its hash and its display prefix. The raw key is never stored."""
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        return raw, _hash_key(raw), raw[:12]

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class AppendOnly(ValueError):
    """An attempt to change or delete an audit entry."""


class AuditQuerySet(models.QuerySet):
    """Audit entries are never updated or deleted through the ORM; the one write after insert
    is sealing an unsealed entry into its tenant's chain (`seal`, console.services.auditlog)."""

    def update(self, **kwargs):
        raise AppendOnly("audit events are append-only")

    def delete(self):
        raise AppendOnly("audit events are append-only")

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for obj in objs:
            obj.tag_for_insert()
        return super().bulk_create(objs, *args, **kwargs)

    def insert_many(self, objs: list) -> None:
        """Unsaved entries in one INSERT, in the order given, each tagged as `bulk_create`
        tags it. On PostgreSQL as one JSON parameter (console.core.rows: the ORM's bulk INSERT
        compiled and adapted every value of every row in Python, most of what a write-behind
        batch's audit entries cost), so the objects get no primary key back; elsewhere
        through `bulk_create`."""
        if not objs:
            return
        if connections[self.db].vendor != "postgresql":
            self.bulk_create(objs)
            return
        for obj in objs:
            obj.tag_for_insert()
        bulk_insert(objs)

    def seal(self, *, chain_seq: int, prev_hash: str | None, hash: str) -> int:  # noqa: A002
        """Give one unsealed entry its place in the chain (the PostgreSQL trigger allows this
        and nothing else)."""
        return super(AuditQuerySet, self.filter(hash__isnull=True)).update(
            chain_seq=chain_seq, prev_hash=prev_hash, hash=hash
        )

    def seal_many(self, seals: list[tuple[int, int, str | None, str]]) -> int:
        """`seal` for many unsealed entries in one UPDATE: `seals` is (id, chain_seq,
        prev_hash, hash) each. Written as SQL (an UPDATE from a VALUES list, which PostgreSQL
        and SQLite both run): the ORM's CASE per column cost ~2 ms of Python a row."""
        if not seals:
            return 0
        connection = connections[self.db]
        quote = connection.ops.quote_name
        table = quote(self.model._meta.db_table)
        values = ", ".join(["(%s, %s, %s, %s)"] * len(seals))
        sql = (  # identifiers from the model, every value a parameter
            f"UPDATE {table} SET chain_seq = CAST(v.column2 AS bigint), "  # noqa: S608
            "prev_hash = CAST(v.column3 AS varchar(64)), hash = CAST(v.column4 AS varchar(64)) "
            f"FROM (VALUES {values}) AS v "
            f"WHERE {table}.id = CAST(v.column1 AS bigint) AND {table}.hash IS NULL"
        )
        params = [value for row in seals for value in row]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount


class AuditEvent(models.Model):
    """Append-only: every decision, admin change and refusal. Rows are never updated (but
    sealed once into the tenant's hash chain) or deleted; on PostgreSQL triggers enforce it
    (migrations 0008, 0013). The actor is a principal and/or a key, or a rule (`rul_...`).
    Inserted only through this model (console.services.audit), which gives each entry its
    random public id and the writer's tag (console.auditchain): a row inserted any other way
    is never sealed, and verify reports it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=64)  # e.g. approval.decided, apikey.created
    actor_principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_rule = models.CharField(max_length=64, null=True, blank=True)  # a rule's public id
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=255)
    data = models.JSONField(default=dict)  # other facts (a refusal's path, method, count ...)
    before = models.JSONField(null=True, blank=True)  # the object's wire form before
    after = models.JSONField(null=True, blank=True)  # ... and after the change
    ip = models.CharField(max_length=64, null=True, blank=True)
    user_agent = models.CharField(max_length=512, null=True, blank=True)
    # The chain, set once after commit (console.services.auditlog.audit_seal): the entry's
    # place in its tenant's chain, the hash of the entry before it, and its own hash.
    chain_seq = models.BigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, null=True, blank=True)
    hash = models.CharField(max_length=64, null=True, blank=True)
    # Since migration 0013 (null before): the wire id (`aud_` + random, so ids tell nothing of
    # other tenants' volume) and the writer's tag over the entry's content (keyed: see
    # console.auditchain.writer_tag).
    public_id = models.CharField(max_length=32, null=True, blank=True)
    writer_tag = models.CharField(max_length=64, null=True, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-at"], name="audit_tenant_at"),
            models.Index(fields=["tenant", "-id"], name="audit_tenant_id"),
            # the distinct actions of a tenant (console.audit.selectors.known_actions: a skip scan)
            models.Index(fields=["tenant", "action"], name="audit_tenant_action"),
            models.Index(
                fields=["tenant", "id"],
                name="audit_unsealed",
                condition=models.Q(hash__isnull=True),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "chain_seq"], name="audit_chain_seq_unique"),
            models.UniqueConstraint(fields=["tenant", "public_id"], name="audit_public_id_unique"),
        ]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnly("audit events are append-only")
        self.tag_for_insert()
        super().save(*args, **kwargs)

    def tag_for_insert(self) -> None:
        """A public id, and the writer's tag over what the row will hold once stored."""
        if self.pk is not None or self.hash is not None:
            raise AppendOnly("audit events are inserted unsealed, once")
        self.public_id = self.public_id or auditchain.new_public_id()
        row = {name: getattr(self, name) for name in auditchain.WRITER_FIELDS}
        for name in ("data", "before", "after"):
            row[name] = auditchain.as_stored(row[name])
        self.writer_tag = auditchain.writer_tag(row)

    @property
    def wire_id(self) -> str:
        return auditchain.wire_id(self.pk, self.public_id)

    def delete(self, *args, **kwargs):
        raise AppendOnly("audit events are append-only")


class AuditRefusalThrottle(models.Model):
    """The `authz.refused` rate limit: one row per (tenant, actor, path), changed only under
    its row lock. `pending` counts the refusals not yet written into an entry; an entry is
    written when the last one is a minute old (console.services.auditlog.audit_refused)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=64)  # "p<principal pk>:k<key pk>"
    path = models.CharField(max_length=255)
    pending = models.PositiveIntegerField(default=0)
    audited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "actor", "path"], name="audit_refusal_throttle_unique"
            )
        ]


class AuditCheckpointQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnly("audit checkpoints are append-only")

    def delete(self):
        raise AppendOnly("audit checkpoints are append-only")


class AuditCheckpoint(models.Model):
    """A signed statement of a tenant's audit chain head (console.services.auditlog): made
    by verify, by exports and periodically by the sweep, and also written to the log, so the
    head is anchored outside the table. `statement` is the exact JSON signed (Ed25519, key
    `key_id`: console.auditchain); `position` and `head_hash` repeat two of its values for
    reading many checkpoints without parsing each. Append-only like the entries."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)
    position = models.BigIntegerField()
    head_hash = models.CharField(max_length=64, null=True, blank=True)
    statement = models.TextField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=100)

    objects = AuditCheckpointQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["tenant", "-id"], name="audit_checkpoint_tenant")]

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnly("audit checkpoints are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnly("audit checkpoints are append-only")


class TenantOidc(models.Model):
    """A tenant's single sign-on: its OpenID provider and how its people map to principals
    (console/sso.py runs the flow; console/oidc.py speaks the protocol). The client secret is
    stored encrypted (console/crypto.py) and never leaves on the wire."""

    PRINCIPAL_CLAIMS = ("email", "preferred_username", "sub")

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="oidc")
    issuer = models.URLField(max_length=500)
    client_id = models.CharField(max_length=255)
    client_secret_encrypted = models.TextField(blank=True)
    principal_claim = models.CharField(max_length=32, default="email")
    groups_claim = models.CharField(max_length=100, default="groups")
    role_map = models.JSONField(default=dict)  # IdP group -> role name
    # Email domains whose people the login page sends to this tenant's provider.
    email_domains = models.JSONField(default=list)
    allow_password_login = models.BooleanField(default=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.tenant.slug}: {self.issuer}"


class SsoDomain(models.Model):
    """An email domain a tenant's SSO claims (one row per entry of `TenantOidc.email_domains`),
    and whether the tenant proved it owns it: a DNS TXT record, a mail to the domain's admin
    address, or an operator's pin (`manage.py sso_domain`). Only a verified domain routes the
    login page to the tenant's provider, and only one tenant may hold it verified; unverified
    claims block nobody (console/services/sso_domains.py)."""

    DNS, MAIL, OPERATOR = "dns", "mail", "operator"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sso_domains")
    domain = models.CharField(max_length=253)
    token = models.CharField(max_length=64)  # the TXT record's value: not a secret
    verified_at = models.DateTimeField(null=True, blank=True)
    method = models.CharField(max_length=16, blank=True)  # DNS, MAIL or OPERATOR
    mail_token_hash = models.CharField(max_length=64, blank=True)  # SHA-256 of the link's token
    mail_sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "domain"], name="sso_domain_unique"),
            models.UniqueConstraint(
                fields=["domain"],
                condition=models.Q(verified_at__isnull=False),
                name="sso_domain_verified_once",
            ),
        ]

    def __str__(self):
        return f"{self.domain} ({self.tenant_id}, {'verified' if self.verified_at else 'claimed'})"


class SigninThrottle(models.Model):
    """Failed sign-in attempts of one account or one address in the current window, and the
    lock they caused (console/signin.py). One row per (scope, key), changed only by atomic
    upserts and conditional updates, so every process counts the same attempts."""

    ACCOUNT = "account"
    ADDRESS = "address"

    scope = models.CharField(max_length=16)  # ACCOUNT or ADDRESS
    key = models.CharField(max_length=64)  # SHA-256 of the username or address, hex
    window_start = models.DateTimeField()
    failures = models.PositiveIntegerField(default=0)  # in the window, in-flight ones included
    locked_until = models.DateTimeField(null=True, blank=True)
    refused_audited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="signin_throttle_unique")
        ]
        indexes = [models.Index(fields=["window_start"], name="signin_throttle_window")]


class UserSession(models.Model):
    """Which login a browser session belongs to, written at sign-in: Django's database
    sessions cannot be found by user, and deactivating a principal ends its sessions at once
    (console/services/principals.py). A row whose session is gone is harmless; rows are
    removed with the sessions they name."""

    session_key = models.CharField(max_length=40, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="browser_sessions"
    )
    created_at = models.DateTimeField(default=timezone.now)
