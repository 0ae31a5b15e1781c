"""What SCIM serves: the User and Group resources as a principal and a team keep them.

The schemas are scim2-models' core User and Group schemas narrowed to the attributes Gavel
keeps, and the models are built from them (`Resource.from_schema`), so what `/Schemas`
publishes, what requests are read with and what responses are written with are one thing:

- User: `userName` (the principal id: immutable), `name` (`formatted` only) and
  `displayName` (both the principal's one name), `emails` (`value`, and `type`, always
  "work": a principal keeps one email), `active` (required: a principal is always active or
  not), `groups` (its teams, read-only); plus the common `id`, `externalId` and `meta`.
- Group: `displayName` (the team name, which is also its id: immutable), `members`
  (`value`, `$ref`, `type`); plus `id`, `externalId` and `meta`.

Attributes a request carries beyond these are ignored (`POLICY`), and so are those that
`attributes` / `excludedAttributes` name; a filter or `sortBy` naming one is a 400.
"""

from __future__ import annotations

from scim2_models import (
    URN,
    Bulk,
    ChangePassword,
    ETag,
    Filter,
    Group,
    Mutability,
    Patch,
    Required,
    Resource,
    ScimPolicy,
    ScimProvider,
    ServiceProviderConfig,
    Sort,
    User,
)
from scim2_models import AuthenticationScheme as Scheme

MAX_RESULTS = 200  # a page holds at most this many resources (count is capped to it)

# attribute → the sub-attributes kept (None: a simple attribute, or all of them)
USER_KEPT = {
    "userName": None,
    "name": {"formatted"},
    "displayName": None,
    "active": None,
    "emails": {"value", "type"},
    "groups": None,
}
GROUP_KEPT = {"displayName": None, "members": {"value", "$ref", "type"}}
USER_CHANGED = {"userName": {"mutability": Mutability.immutable}, "active": {"required": True}}
GROUP_CHANGED = {"displayName": {"mutability": Mutability.immutable}}


def _narrowed(model, kept: dict, changed: dict, sub_changed: dict | None = None):
    schema = model.to_schema()
    attributes = []
    for attribute in schema.attributes:
        if attribute.name not in kept:
            continue
        subs = kept[attribute.name]
        if subs is not None:
            attribute.sub_attributes = [s for s in attribute.sub_attributes if s.name in subs]
            for sub in attribute.sub_attributes:
                for name, value in (
                    (sub_changed or {}).get(f"{attribute.name}.{sub.name}", {}).items()
                ):
                    setattr(sub, name, value)
        for name, value in changed.get(attribute.name, {}).items():
            setattr(attribute, name, Required(value) if name == "required" else value)
        attributes.append(attribute)
    schema.attributes = attributes
    return schema


# A principal's one email is its work email: `type` is always "work".
USER_SUB_CHANGED = {"emails.type": {"canonical_values": ["work"]}}
USER_SCHEMA = _narrowed(User, USER_KEPT, USER_CHANGED, USER_SUB_CHANGED)
GROUP_SCHEMA = _narrowed(Group, GROUP_KEPT, GROUP_CHANGED)
ScimUser = Resource.from_schema(USER_SCHEMA)
ScimGroup = Resource.from_schema(GROUP_SCHEMA)
USER_URN = str(URN(USER_SCHEMA.id))
GROUP_URN = str(URN(GROUP_SCHEMA.id))

CONFIG = ServiceProviderConfig(
    patch=Patch(supported=True),
    bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
    filter=Filter(supported=True, max_results=MAX_RESULTS),
    change_password=ChangePassword(supported=False),
    sort=Sort(supported=True),
    etag=ETag(supported=False),
    authentication_schemes=[
        Scheme(
            type="oauthbearertoken",
            name="Gavel API key",
            description="Authorization: Bearer <a key with the scim scope>",
            primary=True,
        )
    ],
)

# What requests may do beyond the strict reading (scim2-models' tolerances): carry attributes
# the schemas above leave out (read and dropped: identity providers send the whole core
# schema), and the PATCH forms Microsoft Entra sends (a `remove` whose value names the
# entries to remove; `emails[type eq "work"].value` on a user with no email yet adds it).
POLICY = ScimPolicy(
    unknown=ScimPolicy.Unknown.ignore,
    remove_value_as_filter=ScimPolicy.RemoveValue.apply,
    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create,
)
PROVIDER = ScimProvider(models=[ScimUser, ScimGroup], config=CONFIG, policy=POLICY)
