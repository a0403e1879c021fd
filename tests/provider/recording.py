"""A local stand-in for a provider's HTTP API: it records every JSON body posted to it and
answers each with the next queued reply — a JSON body or a sequence of server-sent events — or,
with none queued, a default one.

The official SDKs are pointed at it with ``base_url`` (``max_retries=0``), so what they send and
how they read the answer (their SSE decoders and stream accumulators included) is theirs.
``recording_server`` answers each endpoint with a minimal valid response, for the transport
tests; ``provider_server`` answers what a test queues (the harness kit's recorded responses).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]

RESPONSES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
    },
    "/v1/responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    },
    "/v1/messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}


def sse_bytes(events: list[Json]) -> bytes:
    """The events as an ``text/event-stream`` body (``event:`` when named, then ``data:``)."""
    lines: list[str] = []
    for event in events:
        if "event" in event:
            lines.append(f"event: {event['event']}")
        data = event["data"]
        lines.append(f"data: {data if isinstance(data, str) else json.dumps(data)}")
        lines.append("")
    return ("\n".join(lines) + "\n").encode()


@dataclass
class ProviderServer:
    base_url: str = ""
    replies: deque[Json] = field(default_factory=deque)
    requests: list[tuple[str, Json]] = field(default_factory=list)
    # The same requests' bodies as the bytes that arrived (byte-level checks).
    raw: list[bytes] = field(default_factory=list)

    def answer(self, *replies: Json) -> None:
        """Queues replies: ``{"response": body}`` or ``{"stream": events}`` (a fixture's)."""
        self.replies.extend(replies)


@contextmanager
def provider_server(
    default: Callable[[str], Json] | None = None,
) -> Iterator[ProviderServer]:
    """The running stand-in; ``default(path)`` is the reply when none is queued."""
    recorder = ProviderServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            recorder.requests.append((self.path, json.loads(body)))
            recorder.raw.append(body)
            if recorder.replies or default is None:
                reply = recorder.replies.popleft()
            else:
                reply = default(self.path)
            if "stream" in reply:
                payload, kind = sse_bytes(reply["stream"]), "text/event-stream"
            else:
                payload, kind = json.dumps(reply["response"]).encode(), "application/json"
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class Recorder:
    base_url: str
    bodies: list[tuple[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


@contextmanager
def recording_server() -> Iterator[Recorder]:
    """A stand-in answering every endpoint with its minimal valid response (``RESPONSES``)."""
    with provider_server(default=lambda path: {"response": RESPONSES[path]}) as server:
        yield Recorder(server.base_url, server.requests, server.raw)
