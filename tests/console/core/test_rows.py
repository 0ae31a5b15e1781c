"""console.core.rows: rows in bulk as one JSON parameter."""

import datetime
import json

from console.core.rows import json_text


def test_json_text_keeps_microseconds_on_the_standard_encoders_path_too():
    at = datetime.datetime(2026, 12, 6, 13, 45, 1, 123456, tzinfo=datetime.UTC)
    fast = json.loads(json_text({"at": at, "n": 1}))
    slow = json.loads(json_text({"at": at, "n": 2**70}))  # orjson refuses: the fallback
    assert fast["at"] == slow["at"] and datetime.datetime.fromisoformat(slow["at"]) == at
    assert slow["n"] == 2**70
