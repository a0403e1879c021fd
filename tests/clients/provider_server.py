"""A local stand-in for a provider's HTTP API: it records every JSON body posted to it and
answers each with the next recorded reply, a JSON body or a sequence of server-sent events.

The official SDKs are pointed at it with ``base_url`` (``max_retries=0``), so what they send
and how they read the answer — their SSE decoders and stream accumulators included — is theirs.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]


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

    def answer(self, *replies: Json) -> None:
        """Queues replies: ``{"response": body}`` or ``{"stream": events}`` (a fixture's)."""
        self.replies.extend(replies)


@contextmanager
def provider_server() -> Iterator[ProviderServer]:
    recorder = ProviderServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            recorder.requests.append((self.path, json.loads(self.rfile.read(length))))
            reply = recorder.replies.popleft()
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
