"""Input validation (SPEC §8): every field checked, errors name the field.

Pure checks on the commands, run before any database work; the checks that need the session
(an admission exists, a tool result answers an open call) live with the use cases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from admission_service.app.commands import (
    AdmitCommand,
    CompactCommand,
    PlanCompactionCommand,
    ReconcileCommand,
    RecordCommand,
    RouteRequest,
    Usage,
)
from admission_service.app.limits import Limits
from admission_service.domain import messages as msg
from admission_service.domain.errors import InvalidArgument
from admission_service.domain.memo import BoundedMemo
from admission_service.domain.wire_common import inline_image, is_data_uri

# The blocks an assistant output may carry.
ASSISTANT_BLOCKS = (
    msg.Text,
    msg.Reasoning,
    msg.RedactedReasoning,
    msg.ReasoningItem,
    msg.ToolCall,
)
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
INT64_MAX = 2**63 - 1


def utf8_size(text: str) -> int:
    """The bytes ``text`` is sent as. An ASCII text (known without a scan) is its length;
    others are encoded to count."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_session_id(session_id: str, limits: Limits, field: str = "session_id") -> None:
    if not session_id:
        raise InvalidArgument(field, "is required")
    _check_length(session_id, field, limits.max_session_id_length)
    if not SESSION_ID.fullmatch(session_id):
        raise InvalidArgument(field, "may hold only letters, digits, dots, underscores and hyphens")


def _check_no_nul(value: str, field: str) -> None:
    """Identifiers are stored as PostgreSQL text, which cannot hold NUL (message text can:
    it round-trips byte for byte)."""
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL characters")


def _check_length(value: str, field: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidArgument(field, "is longer than {limit} characters", limit=limit)


def check_request_id(request_id: str, limits: Limits) -> None:
    _check_length(request_id, "request_id", limits.max_request_id_length)
    _check_no_nul(request_id, "request_id")


def check_tool_call_id(call_id: str, field: str, limits: Limits) -> None:
    if not call_id:
        raise InvalidArgument(field, "is required")
    _check_length(call_id, field, limits.max_tool_call_id_length)
    _check_no_nul(call_id, field)


def check_expected_revision(expected: int | None) -> None:
    if expected is not None and expected < 0:
        raise InvalidArgument("expected_revision", "must not be negative")


def _check_count(value: int, field: str, *, maximum: int = INT64_MAX) -> None:
    if value < 0:
        raise InvalidArgument(field, "must not be negative")
    if value > maximum:
        raise InvalidArgument(field, "must be at most {limit}", limit=maximum)


def _check_json_object(text: str, field: str, max_depth: int) -> None:
    too_deep = InvalidArgument(
        field,
        "is nested deeper than {limit} levels (max_json_depth, a JSON depth limit)",
        limit=max_depth,
    )
    too_deep.metadata["max_json_depth"] = str(max_depth)
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidArgument(field, "is not valid JSON") from None
    except RecursionError:  # deeper than the parser recurses: far past any limit
        raise too_deep from None
    if not isinstance(value, dict):
        raise InvalidArgument(field, "must be a JSON object")
    # Fewer brackets than the limit cannot nest deeper than it (the usual case: no walk).
    if text.count("{") + text.count("[") > max_depth and _json_depth(value) > max_depth:
        raise too_deep


def _json_depth(value: Any) -> int:
    """How deeply ``value``'s arrays and objects nest (iterative: any depth is safe)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def check_route(route: RouteRequest, limits: Limits) -> None:
    for name, value in (("provider", route.provider), ("model", route.model)):
        if not value:
            raise InvalidArgument(f"route.{name}", "is required")
        _check_length(value, f"route.{name}", limits.max_route_name_length)
    _check_count(route.context_window, "route.context_window")


def check_tools(tools: Sequence[msg.Tool], limits: Limits) -> None:
    if len(tools) > limits.max_tools:
        raise InvalidArgument("tools", "holds more than {limit} tools", limit=limits.max_tools)
    names: set[str] = set()
    for index, tool in enumerate(tools):
        field = f"tools[{index}]"
        if not tool.name:
            raise InvalidArgument(f"{field}.name", "is required")
        _check_length(tool.name, f"{field}.name", limits.max_tool_name_length)
        if tool.name in names:
            raise InvalidArgument(f"{field}.name", "duplicates tool {name!r}", name=tool.name)
        names.add(tool.name)
        if utf8_size(tool.parameters_json) + utf8_size(tool.description) > (
            limits.max_tool_schema_bytes
        ):
            raise InvalidArgument(
                field, "is larger than {limit} bytes", limit=limits.max_tool_schema_bytes
            )
    _check_schemas(tuple(tool.parameters_json for tool in tools), limits.max_json_depth)


def _check_schemas(schemas: tuple[str, ...], max_depth: int) -> None:
    """Each tool's schema (empty: no parameters) is a JSON object within the depth limit. A set
    found so is remembered (``VALID_SCHEMAS``): a harness sends the same tools every step, and
    parsing 40 schemas took ~0.5 ms of each, 64 schemas of 12 MiB ~40 ms of the event loop.
    A refusal is never remembered (it raises)."""

    def check() -> None:
        for index, text in enumerate(schemas):
            if text:
                _check_json_object(text, f"tools[{index}].parameters_json", max_depth)

    VALID_SCHEMAS.get((schemas, max_depth), sum(map(len, schemas)), check)


# The tool sets whose schemas were found valid, within 4 MiB of schema text, and the last
# larger one (domain/memo.py).
VALID_SCHEMAS: BoundedMemo[tuple[tuple[str, ...], int], None] = BoundedMemo(4 * 1024 * 1024)


def _block_size(block: msg.Block) -> int:
    if isinstance(block, msg.Text):
        return utf8_size(block.text)
    if isinstance(block, msg.Reasoning):
        return utf8_size(block.text) + utf8_size(block.signature)
    if isinstance(block, msg.RedactedReasoning):
        return utf8_size(block.provider) + utf8_size(block.data)
    if isinstance(block, msg.ReasoningItem):
        parts = (block.item_id, block.encrypted_content, *block.summary, *block.content)
        return sum(map(utf8_size, parts))
    if isinstance(block, msg.Image):
        return utf8_size(block.uri) + utf8_size(block.media_type)
    if isinstance(block, msg.ToolCall):
        return sum(map(utf8_size, (block.call_id, block.name, block.arguments_json)))
    return utf8_size(block.call_id) + sum(_block_size(inner) for inner in block.content)


def _check_image(image: msg.Image, field: str) -> None:
    """An image is a URL or a base64 ``data:`` URI, the two forms every provider format can
    carry (an inline image goes to Anthropic as a base64 source with the URI's media type)."""
    if not image.uri:
        raise InvalidArgument(f"{field}.uri", "is required")
    if not is_data_uri(image.uri):
        return
    inline = inline_image(image)
    if inline is None:
        raise InvalidArgument(f"{field}.uri", "a data: URI must be data:<media type>;base64,<data>")
    if image.media_type and image.media_type.lower() != inline.media_type:
        raise InvalidArgument(
            f"{field}.media_type",
            "{media_type!r} differs from the data: URI, whose media type is {uri_media_type!r}",
            media_type=image.media_type,
            uri_media_type=inline.media_type,
        )


def _check_phase(phase: str, role: msg.Role, field: str) -> None:
    """A phase labels assistant text, with one of the values the Responses API defines."""
    if role is not msg.Role.ASSISTANT:
        raise InvalidArgument(field, "only assistant text carries a phase")
    if phase not in msg.PHASES:
        raise InvalidArgument(
            field,
            "{phase!r} is not one of {phases}",
            phase=phase,
            phases=", ".join(sorted(msg.PHASES)),
        )


def check_message(
    message: msg.Message, field: str, limits: Limits, allowed: tuple[type, ...]
) -> None:
    # An assistant may say nothing (its reasoning alone, or nothing: it derives to nothing), and
    # a tool may return nothing; a user message holds something.
    if not message.content and message.role not in (msg.Role.ASSISTANT, msg.Role.TOOL):
        raise InvalidArgument(f"{field}.content", "must hold at least one block")
    if len(message.content) > limits.max_blocks_per_message:
        raise InvalidArgument(
            f"{field}.content",
            "holds more than {limit} blocks",
            limit=limits.max_blocks_per_message,
        )
    if sum(_block_size(block) for block in message.content) > limits.max_message_bytes:
        raise InvalidArgument(field, "is larger than {limit} bytes", limit=limits.max_message_bytes)
    for index, block in enumerate(message.content):
        where = f"{field}.content[{index}]"
        if not isinstance(block, allowed):
            raise InvalidArgument(where, f"a {type(block).__name__} block is not allowed here")
        if isinstance(block, msg.Text) and block.phase:
            _check_phase(block.phase, message.role, f"{where}.text.phase")
        if isinstance(block, msg.Image):
            _check_image(block, f"{where}.image")
        if isinstance(block, msg.RedactedReasoning):
            for name, value in (("provider", block.provider), ("data", block.data)):
                if not value:
                    raise InvalidArgument(f"{where}.redacted_reasoning.{name}", "is required")
        if isinstance(block, msg.ReasoningItem) and not block.item_id:
            raise InvalidArgument(f"{where}.reasoning_item.id", "is required")
        if isinstance(block, msg.ToolCall):
            check_tool_call_id(block.call_id, f"{where}.tool_call.call_id", limits)
            if not block.name:
                raise InvalidArgument(f"{where}.tool_call.name", "is required")
            _check_length(block.name, f"{where}.tool_call.name", limits.max_tool_name_length)
            _check_json_object(
                block.arguments_json or "{}",
                f"{where}.tool_call.arguments_json",
                limits.max_json_depth,
            )


def check_config(config: Sequence[tuple[str, str]], limits: Limits) -> None:
    if len(config) > limits.max_config_entries:
        raise InvalidArgument(
            "config", "holds more than {limit} entries", limit=limits.max_config_entries
        )
    for key, value in config:
        if not key:
            raise InvalidArgument("config", "has an empty key")
        if len(key) > limits.max_config_key_length:
            raise InvalidArgument(
                "config",
                "has a key longer than {limit} characters",
                limit=limits.max_config_key_length,
            )
        _check_no_nul(key, "config")
        if utf8_size(value) > limits.max_config_value_bytes:
            raise InvalidArgument(
                f"config[{key}]",
                "is larger than {limit} bytes",
                limit=limits.max_config_value_bytes,
            )


def check_admit(command: AdmitCommand, limits: Limits) -> None:
    check_session_id(command.session_id, limits)
    check_expected_revision(command.expected_revision)
    _check_count(command.turn, "turn")
    _check_count(command.step, "step")
    if utf8_size(command.rendered_prompt) > limits.max_prompt_bytes:
        raise InvalidArgument(
            "rendered_prompt", "is larger than {limit} bytes", limit=limits.max_prompt_bytes
        )
    check_tools(command.tools, limits)
    check_config(command.config, limits)
    check_route(command.route, limits)
    if len(command.users) > limits.max_users:
        raise InvalidArgument("users", "holds more than {limit} messages", limit=limits.max_users)
    for index, user in enumerate(command.users):
        if user.role is not msg.Role.USER:
            raise InvalidArgument(f"users[{index}].role", "must be USER")
        check_message(user, f"users[{index}]", limits, (msg.Text, msg.Image))


def check_admission_id(admission_id: str, limits: Limits) -> None:
    if not admission_id:
        raise InvalidArgument("admission_id", "is required")
    _check_length(admission_id, "admission_id", limits.max_admission_id_length)
    _check_no_nul(admission_id, "admission_id")


def check_reconcile(command: ReconcileCommand, limits: Limits) -> None:
    check_session_id(command.session_id, limits)
    check_expected_revision(command.expected_revision)
    check_admission_id(command.admission_id, limits)
    check_route(command.route, limits)


def check_usage(usage: Usage) -> None:
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        _check_count(getattr(usage, name), f"usage.{name}")


def check_record(command: RecordCommand, limits: Limits) -> None:
    check_session_id(command.session_id, limits)
    check_expected_revision(command.expected_revision)
    check_admission_id(command.admission_id, limits)
    if command.assistant is None and not command.tool_results and command.usage is None:
        raise InvalidArgument(
            "assistant", "a record needs an assistant message, tool results or usage"
        )
    if command.assistant is not None:
        if command.assistant.role is not msg.Role.ASSISTANT:
            raise InvalidArgument("assistant.role", "must be ASSISTANT")
        check_message(command.assistant, "assistant", limits, ASSISTANT_BLOCKS)
        ids = [call.call_id for call in command.assistant.tool_calls()]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("assistant.content", "repeats a tool call id")
    if len(command.tool_results) > limits.max_tool_results:
        raise InvalidArgument(
            "tool_results", "holds more than {limit} results", limit=limits.max_tool_results
        )
    answered: set[str] = set()
    for index, result in enumerate(command.tool_results):
        field = f"tool_results[{index}]"
        check_tool_call_id(result.call_id, f"{field}.call_id", limits)
        if result.call_id in answered:
            raise InvalidArgument(
                f"{field}.call_id", "answers {call_id!r} twice", call_id=result.call_id
            )
        answered.add(result.call_id)
        wrapped = msg.Message(msg.Role.TOOL, result.content)
        check_message(wrapped, field, limits, (msg.Text, msg.Image))
        if result.is_error and not any(
            isinstance(block, msg.Text) and block.text for block in result.content
        ):
            # The OpenAI formats have no error flag: the text is how the model learns it failed.
            raise InvalidArgument(f"{field}.content", "an error result must describe the failure")
    if command.usage is not None:
        check_usage(command.usage)


def check_plan(command: PlanCompactionCommand, limits: Limits) -> None:
    check_session_id(command.session_id, limits)
    if (command.retain_tokens is None) == (command.seq_range is None):
        raise InvalidArgument("selection", "set exactly one of retain_tokens and range")
    if command.retain_tokens is not None:
        _check_count(command.retain_tokens, "retain_tokens")
    if command.seq_range is not None:
        _check_count(command.seq_range[0], "range.start_seq")
        _check_count(command.seq_range[1], "range.end_seq")


def check_compact(command: CompactCommand, limits: Limits) -> None:
    check_session_id(command.session_id, limits)
    check_expected_revision(command.expected_revision)
    if not command.plan_token:
        raise InvalidArgument("plan_token", "is required")
    if not command.summary:
        raise InvalidArgument("summary", "is required")
    if utf8_size(command.summary) > limits.max_summary_bytes:
        raise InvalidArgument(
            "summary", "is larger than {limit} bytes", limit=limits.max_summary_bytes
        )


def check_page_size(page_size: int, limits: Limits) -> int:
    if page_size < 0:
        raise InvalidArgument("page_size", "must not be negative")
    if page_size == 0:
        return limits.default_page_size
    return min(page_size, limits.max_page_size)
