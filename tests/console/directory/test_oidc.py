"""console/oidc.py's ID token check, on tokens signed here: each of signature, iss, aud,
exp and nonce alone is enough to refuse one."""

import time

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from console.directory import oidc

ISSUER = "https://idp.example"
CLIENT = "gavel"
NONCE = "n-123"


@pytest.fixture(scope="module")
def key():
    return RSAKey.generate_key(2048, parameters={"kid": "k1"})


def _token(key, **changes):
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "u-1",
        "aud": CLIENT,
        "exp": now + 300,
        "iat": now,
        "nonce": NONCE,
        "email": "a@example.com",
    }
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)


def _verify(token, key):
    jwks = KeySet([key]).as_dict(private=False)
    return oidc.verify_id_token(token, jwks=jwks, issuer=ISSUER, client_id=CLIENT, nonce=NONCE)


def test_a_good_token_gives_its_claims(key):
    assert _verify(_token(key), key)["email"] == "a@example.com"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"aud": "another-app"}, "invalid_token"),
        ({"aud": ["another-app"], "azp": CLIENT}, "invalid_token"),
        ({"iss": "https://evil.example"}, "invalid_token"),
        ({"exp": int(time.time()) - 3600}, "invalid_token"),
        ({"nonce": "replayed"}, "invalid_token"),
        ({"nonce": None}, "invalid_token"),
    ],
)
def test_a_token_failing_one_check_is_refused(key, changes, reason):
    with pytest.raises(oidc.OidcError) as refused:
        _verify(_token(key, **changes), key)
    assert refused.value.reason == reason


def test_a_token_signed_by_another_key_is_refused(key):
    other = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    with pytest.raises(oidc.OidcError) as refused:
        _verify(_token(other), key)
    assert refused.value.reason == "bad_signature"


def test_an_unsigned_token_is_refused(key):
    header = "eyJhbGciOiJub25lIn0"  # {"alg":"none"}
    body = _token(key).split(".")[1]
    with pytest.raises(oidc.OidcError):
        _verify(f"{header}.{body}.", key)
