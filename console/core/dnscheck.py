"""A name's DNS TXT records, through dnspython: how a tenant proves it owns an email domain
for single sign-on (console/services/sso_domains.py). `txt_records` is the seam tests replace:
no test asks real DNS."""

from __future__ import annotations

import dns.exception
import dns.resolver

LIFETIME_SECONDS = 5.0  # the whole lookup, every server and retry included


def txt_records(name: str) -> list[str]:
    """The TXT strings of `name` (each record's parts joined), or [] when it has none or DNS
    does not answer in time."""
    try:
        answer = dns.resolver.resolve(name, "TXT", lifetime=LIFETIME_SECONDS)
    except dns.exception.DNSException:
        return []
    return [b"".join(record.strings).decode("utf-8", "replace") for record in answer]
