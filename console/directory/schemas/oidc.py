"""The wire shapes of a tenant's single sign-on settings (`/api/v1/tenant/oidc`), shared by
the API and the /manage/ settings form (which validates with them)."""

from __future__ import annotations

from typing import Annotated, Literal

from ninja import Field
from pydantic import ConfigDict, StrictBool, StrictStr
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema

_FORBID = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
Name = Annotated[StrictStr, Field(min_length=1, max_length=255)]
Domain = Annotated[StrictStr, Field(min_length=3, max_length=253)]


class OidcPatch(CamelSchema):
    """PATCH /tenant/oidc: any of the fields (the first PATCH needs issuer, clientId and
    clientSecret); `clientSecret` is write-only."""

    model_config = _FORBID

    issuer: Annotated[
        StrictStr,
        Field(
            min_length=1,
            max_length=500,
            description="the OpenID provider's issuer URL: https:// (http:// only in "
            "development, with GAVEL_OIDC_ALLOW_HTTP); its discovery document is read",
            json_schema_extra={"format": "uri", "pattern": "^https://[^\\u0000]*$"},
        ),
    ] = None
    client_id: Name = None
    client_secret: Annotated[StrictStr, Field(min_length=1, max_length=1000)] = None
    principal_claim: Literal["email", "preferred_username", "sub"] = None
    groups_claim: Name = None
    role_map: Annotated[dict[Name, Name], Field(max_length=200)] = None
    email_domains: Annotated[list[Domain], Field(max_length=50)] = None
    allow_password_login: StrictBool = None

    def changes(self) -> dict:
        dumped = self.model_dump()
        return {name: dumped[name] for name in self.model_fields_set}


class DomainVerificationOut(CamelSchema):
    """A claimed email domain: whether the tenant proved it owns it (only then does the login
    page route its people here), how, and the DNS TXT record that proves it."""

    domain: str
    verified: bool
    method: Literal["dns", "mail", "operator"] | None
    verified_at: str | None
    txt_name: str
    txt_value: str


class OidcOut(CamelSchema):
    issuer: str | None
    client_id: str | None
    client_secret_set: bool
    principal_claim: str
    groups_claim: str
    role_map: dict[str, str]
    email_domains: list[str]
    allow_password_login: bool
    domain_verification: list[DomainVerificationOut]
    redirect_uri: str
