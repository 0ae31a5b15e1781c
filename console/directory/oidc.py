"""OpenID Connect, the relying party's side, through Authlib: the issuer's discovery document,
the authorization URL (PKCE S256, state, nonce), the code exchange, and the ID token's
verification (JWKS signature, iss, aud, exp, nonce). No database here: console/sso.py keeps
each tenant's settings and the attempt in the session, and calls these per tenant.

Why Authlib (docs/architecture.md, "Single sign-on"): its clients are plain objects built per
call with any client id, secret and endpoints, so one deployment serves a provider per tenant;
mozilla-django-oidc and django-allauth read one provider from settings (or a provider
registry of their own) and own the views and the user model's creation, which here is
`principal_*` services' work.

Every request to the provider (discovery, JWKS, the token endpoint) goes through
console/outbound.py: a total deadline, a size cap, no redirect, no internal address (an
issuer's document may name any `jwks_uri` or `token_endpoint`: each is checked when it is
called), and errors said in generic words. Authlib builds the token request (its client
authentication and PKCE parameters); outbound.py sends it.
"""

from __future__ import annotations

import json
import secrets

from authlib.integrations.httpx_client import OAuth2Client
from authlib.oauth2.auth import ClientAuth
from authlib.oauth2.rfc6749.parameters import prepare_token_request
from authlib.oidc.core import CodeIDToken
from django.conf import settings
from joserfc import jwt
from joserfc.errors import JoseError as JoserfcError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from console.core import outbound

SCOPES = "openid email profile"
LEEWAY = 60  # seconds of clock skew allowed on exp / iat
REQUIRED_METADATA = ("authorization_endpoint", "token_endpoint", "jwks_uri")


class OidcError(Exception):
    """A step of the protocol failed: `reason` is the audit's word, `message` the person's."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def _call(method: str, url: str, **kwargs) -> outbound.Answer:
    allow_loopback = outbound.loopback_allowed(settings.GAVEL_OIDC_ALLOW_HTTP)
    answer = outbound.request(method, url, allow_loopback=allow_loopback, read_body=True, **kwargs)
    if answer.error:
        raise OidcError("unreachable", f"{url} could not be reached ({answer.error})")
    return answer


def _json_object(answer: outbound.Answer) -> dict | None:
    try:
        body = json.loads(answer.body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _get_json(url: str) -> dict:
    answer = _call("GET", url, headers={"Accept": "application/json"})
    if answer.status_code != 200:
        raise OidcError("bad_response", f"{url} answered HTTP {answer.status_code}")
    body = _json_object(answer)
    if body is None:
        raise OidcError("bad_response", f"{url} did not answer a JSON object")
    return body


def discover(issuer: str) -> dict:
    """The issuer's discovery document, checked: it names this very issuer and the endpoints
    the code flow needs (OpenID Connect Discovery 1.0, section 4)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    metadata = _get_json(url)
    if metadata.get("issuer") != issuer:
        raise OidcError(
            "issuer_mismatch",
            f"the discovery document names the issuer {metadata.get('issuer')!r}, not {issuer!r}",
        )
    missing = [name for name in REQUIRED_METADATA if not isinstance(metadata.get(name), str)]
    if missing:
        raise OidcError("incomplete", f"the discovery document has no {', '.join(missing)}")
    types = metadata.get("response_types_supported")
    if isinstance(types, list) and "code" not in types:
        raise OidcError("incomplete", "the provider does not offer the authorization code flow")
    return metadata


def new_attempt() -> dict:
    """A fresh state, nonce and PKCE verifier (each attempt has its own)."""
    return {
        "state": secrets.token_urlsafe(32),
        "nonce": secrets.token_urlsafe(32),
        "verifier": secrets.token_urlsafe(64),
    }


def _auth_method(metadata: dict) -> str:
    offered = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    return "client_secret_post" if "client_secret_basic" not in offered else "client_secret_basic"


def _client(metadata: dict, *, client_id: str, client_secret: str, redirect_uri: str):
    return OAuth2Client(
        client_id,
        client_secret,
        scope=SCOPES,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method=_auth_method(metadata),
    )


def authorization_url(
    metadata: dict, *, client_id: str, redirect_uri: str, attempt: dict, login_hint=None
) -> str:
    client = _client(metadata, client_id=client_id, client_secret="", redirect_uri=redirect_uri)
    extra = {"login_hint": login_hint} if login_hint else {}
    with client:
        url, _state = client.create_authorization_url(
            metadata["authorization_endpoint"],
            state=attempt["state"],
            nonce=attempt["nonce"],
            code_verifier=attempt["verifier"],
            **extra,
        )
    return url


def exchange_code(
    metadata: dict, *, client_id: str, client_secret: str, redirect_uri: str, code: str, verifier
) -> dict:
    """The token endpoint's answer for this code (with the PKCE verifier)."""
    url = metadata["token_endpoint"]
    body = prepare_token_request(
        "authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=verifier
    )
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8",
    }
    auth = ClientAuth(client_id, client_secret, _auth_method(metadata))
    url, headers, body = auth.prepare("POST", url, headers, body)
    try:
        answer = _call("POST", url, headers=headers, content=body.encode())
    except OidcError as error:
        raise OidcError("token_refused", f"the provider refused the code: {error}") from None
    token = _json_object(answer)
    if answer.status_code != 200 or token is None or "error" in token:
        error = (token or {}).get("error")
        said = f" ({error[:100]})" if isinstance(error, str) else ""
        raise OidcError(
            "token_refused", f"the provider refused the code: HTTP {answer.status_code}{said}"
        )
    if not token.get("id_token"):
        raise OidcError("no_id_token", "the provider answered no ID token")
    return dict(token)


def verify_id_token(
    id_token: str, *, jwks: dict, issuer: str, client_id: str, nonce: str, access_token=None
) -> dict:
    """The ID token's claims, once its signature (the issuer's keys), `iss`, `aud` (and
    `azp`), `exp`, `iat` and `nonce` hold (OpenID Connect Core 1.0, 3.1.3.7)."""
    try:
        decoded = jwt.decode(
            id_token,
            KeySet.import_key_set(jwks),
            registry=JWSRegistry(strict_check_header=False),
        )
    except (JoserfcError, ValueError) as error:
        raise OidcError(
            "bad_signature", f"the ID token's signature does not hold ({error})"
        ) from None
    params = {"nonce": nonce, "client_id": client_id}
    if access_token:
        params["access_token"] = access_token
    claims = CodeIDToken(
        decoded.claims,
        decoded.header,
        {
            "iss": {"essential": True, "values": [issuer]},
            "aud": {"essential": True, "values": [client_id]},
        },
        params,
    )
    try:
        claims.validate(leeway=LEEWAY)
    except JoserfcError as error:
        raise OidcError("invalid_token", f"the ID token is not valid here ({error})") from None
    audience = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if client_id not in audience:  # azp alone does not make a token ours
        raise OidcError("invalid_token", "the ID token was issued for another audience")
    return dict(claims)


def jwks(metadata: dict) -> dict:
    return _get_json(metadata["jwks_uri"])
