"""Input limits (SPEC §8), configurable, with documented defaults."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    max_session_id_length: int = 128
    max_request_id_length: int = 128
    max_admission_id_length: int = 128
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
    default_page_size: int = 50
    max_page_size: int = 1000
