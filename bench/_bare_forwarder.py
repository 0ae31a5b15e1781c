"""bench/mcp.py's floor: a bare HTTP forwarder served by daphne, as the gateway is, that does
no Gavel work at all (no key, no session row, no rule, no record; not even the MCP protocol):
each request's body and headers go to the upstream on one kept httpx client and its answer
(JSON or an SSE stream) comes back as it arrives. What any gateway in daphne pays for the hop
alone on this machine; the gateway's figures are read beside it. Never served by the console.
"""

from __future__ import annotations

import os

import httpx

UPSTREAM = os.environ.get("BENCH_BARE_UPSTREAM", "")
DROPPED = {b"host", b"content-length", b"connection", b"transfer-encoding"}
_client: httpx.AsyncClient | None = None


async def application(scope, receive, send):
    global _client
    if scope["type"] != "http":
        return
    if scope["path"] == "/api/v1/openapi.json":  # bench/_support.daphne's readiness probe
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})
        return
    if _client is None:
        _client = httpx.AsyncClient(timeout=60)
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in DROPPED]
    request = _client.build_request(
        scope["method"], UPSTREAM, headers=headers, content=b"".join(chunks)
    )
    answer = await _client.send(request, stream=True)
    try:
        kept = [(k, v) for k, v in answer.headers.raw if k.lower() not in DROPPED]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await answer.aclose()
