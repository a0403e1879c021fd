"""Input limits (SPEC §8) and session bounds (issue 13), configurable, with documented defaults.

The session bounds keep a session, and every response that grows with it, finite. Their defaults
are far above what a real agent session reaches: a 1M-token context window holds about 4 MiB of
text, so a surface of 256 MiB or a million nodes is only reached by runaway or hostile use. A
write that would take a session past a bound is refused with RESOURCE_EXHAUSTED (compact the
session to continue); a write that shrinks it (a compaction) is always allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    # Every client string that reaches an index or a key has a bound, in characters, checked
    # at the edge (PostgreSQL refuses a b-tree entry over 2 704 bytes: a longer one failed
    # inside the database, issue 21). Tenant, session and the longest id, four bytes each,
    # stay far below that row limit.
    max_session_id_length: int = 128
    max_request_id_length: int = 128
    max_admission_id_length: int = 128
    # A tool call's id (ToolCallBlock.call_id, ToolResult.call_id): the key of tool_calls.
    # Providers' ids are a few dozen characters (call_…, toolu_…).
    max_tool_call_id_length: int = 256
    max_prompt_bytes: int = MIB
    max_users: int = 64
    max_message_bytes: int = MIB
    max_blocks_per_message: int = 256
    max_tools: int = 128
    max_tool_name_length: int = 128
    max_tool_schema_bytes: int = 256 * 1024
    max_tool_results: int = 128
    max_route_name_length: int = 128
    max_summary_bytes: int = MIB
    # Nesting of a JSON value a client sends (Tool.parameters_json, ToolCallBlock.arguments_json):
    # real schemas and arguments stay far below; deeper is refused before anything recurses.
    max_json_depth: int = 64
    # AdmitRequest.config: pairs, key length (characters) and value size (UTF-8 bytes).
    max_config_entries: int = 64
    max_config_key_length: int = 128
    max_config_value_bytes: int = 4096
    default_page_size: int = 50
    max_page_size: int = 1000
    # Session bounds (app/bounds.py): the surviving surface's frame bytes and node count.
    max_session_surface_bytes: int = 256 * MIB
    max_session_surface_nodes: int = 1_000_000
    # Largest derived request (what a response carries of it: message frames, rendered body
    # or both) a unary response carries; gRPC clients receive 4 MiB by default. Larger ones are
    # refused, pointing at StreamAdmit, one content and DELTA.
    max_response_bytes: int = 4 * MIB
    # The same for a streamed response (StreamAdmit, StreamReconcile: chunks of 1 MiB), sized
    # for a session at its surface bound returned in both forms, a body's JSON escaping
    # included.
    max_streamed_response_bytes: int = 1024 * MIB
    # The streamed responses one worker holds while it sends them, in all (api/streaming.py): a
    # caller reads a response only as fast as it likes, so its bytes stay in the worker until
    # then. One more is dropped before its first chunk (UNAVAILABLE; a retry replays it). At
    # least max_streamed_response_bytes.
    max_streaming_bytes: int = 2048 * MIB
    # ListEvents pages stop at this many bytes of events (and at page_size events); an event
    # larger than the budget still comes out, alone on its page.
    max_events_page_bytes: int = MIB
    # ListTrajectory pages stop at this many bytes (and at page_size entries), counting each
    # distinct prompt and tool set the page carries once; an entry whose own bytes and contents
    # exceed it still comes out, alone on its page. Below the clients' 4 MiB default.
    max_trajectory_page_bytes: int = 2 * MIB


@dataclass(frozen=True, slots=True)
class Quotas:
    """Per-tenant quotas (app/quotas.py); 0 turns one off, the default: a deployment sets
    what it sells."""

    sessions: int = 0
    stored_bytes: int = 0
    concurrent_calls: int = 0
    usage_refresh_seconds: float = 5.0


# Idempotency keys (app/sweeper.py): a retry within the retention window replays (AIP-155).
IDEMPOTENCY_RETENTION_SECONDS = 24 * 3600.0
IDEMPOTENCY_SWEEP_SECONDS = 60.0

# The default bound of a worker's session cache (storage/session_cache.py,
# PAS_SESSION_CACHE_BYTES):
# an entry is a session's indexed state (its system nodes, open calls, last admission and the
# frames since its last request), a few KiB for most; 16 MiB keeps thousands and holds a
# worker's memory well under its budget (docs/BENCHMARKS.md, S6).
SESSION_CACHE_BYTES = 16 * MIB

# The default bound of the large node frames a worker holds (storage/held_frames.py,
# PAS_HELD_FRAME_BYTES): a FULL read of a session it committed need not fetch them again. It
# holds the tool outputs of three million-token sessions (4.6 MB each; at 8 MiB, S7's two
# sessions on one worker took turns evicting each other and neither gained); full, it costs a
# worker about what it says (docs/BENCHMARKS.md, eighteenth round).
HELD_FRAME_BYTES = 16 * MIB

# The default bound of the rendered bodies a worker holds (app/held_bodies.py,
# PAS_HELD_BODY_BYTES): the next FULL body of a session it committed is made from the held one
# and the messages after it. It holds three million-token bodies (4.6 MB each: S7's formats).
HELD_BODY_BYTES = 16 * MIB

# How long a streamed response's chunk may wait for its caller to read (api/streaming.py).
STREAM_STALL_SECONDS = 30.0
