"""console/core/paging.py: the one keyset-cursor codec every list uses (the lists' own tests
check each list's cursors and error bodies on the wire)."""

import json

import pytest

from console.core import paging


def test_cursors_are_unpadded_urlsafe_base64_and_read_back():
    assert paging.encode("key:12") == "a2V5OjEy"
    assert paging.decode("a2V5OjEy") == "key:12"
    assert paging.decode_pk("key", paging.encode_pk("key", 12)) == 12
    assert paging.decode_tagged("b", paging.encode("b7")) == 7
    pair = json.dumps(["2026-01-01T00:00:00+00:00", 3])
    assert json.loads(paging.decode_bytes(paging.encode(pair))) == ["2026-01-01T00:00:00+00:00", 3]
    assert "=" not in paging.encode("x")


@pytest.mark.parametrize(
    "read",
    [
        lambda: paging.decode_pk("key", paging.encode_pk("rule", 1)),  # another list's cursor
        lambda: paging.decode_pk("key", paging.encode("key:-1")),
        lambda: paging.decode_pk("key", "!!!"),  # not base64
        lambda: paging.decode_tagged("b", paging.encode("bx")),
        lambda: paging.decode_tagged("b", paging.encode("p1")),
        lambda: paging.decode("_w"),  # b'\xff': not UTF-8
    ],
)
def test_a_cursor_this_server_did_not_issue_is_a_value_error(read):
    with pytest.raises(ValueError):
        read()
