"""The shared fixtures of the harness kit's converters: ``tests/fixtures/harness/*.json``.

Each case is one provider response as its API sends it — a JSON body, or a recorded sequence of
server-sent events in the documented shapes, which the tests feed to the official SDK's own
stream accumulator through a local HTTP server — and the tool results a harness makes from its
own values, with the ``StepOutput`` both kits must build from them. ``step_output`` is written
here by hand (the expectation, not the converters' output); ``step_output_base64`` is its
protobuf encoding, which the Python tests (``tests/clients/test_harness_outputs.py``) and the
TypeScript tests (``clients/typescript/test/kitOutputs.test.ts``) compare their bytes with.

Regenerate after a deliberate change with ``.venv/bin/python -m tests.harness_fixtures``; a test
fails while a file differs from what this module writes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from promptadmission.v1 import admission_service_pb2 as api

DIRECTORY = Path(__file__).parent / "fixtures" / "harness"
ADMISSION_ID = "adm-fixture"
Json = dict[str, Any]
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4"
    "DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)
SIGNATURE = "EqQBCkYIBRgCKkDsigXq9c7Hq/ZsV1cQ+AvGsm9Qt2y2Yb5c1r1lhw=="


def text(value: str, phase: str = "") -> Json:
    return {"text": {"text": value, "phase": phase} if phase else {"text": value}}


def reasoning(value: str, signature: str = "") -> Json:
    block: Json = {"text": value}
    if signature:
        block["signature"] = signature
    return {"reasoning": block}


def reasoning_item(item_id: str, encrypted: str, summary: list[str]) -> Json:
    return {"reasoningItem": {"id": item_id, "encryptedContent": encrypted, "summary": summary}}


def redacted(data: str, provider: str = "anthropic") -> Json:
    return {"redactedReasoning": {"provider": provider, "data": data}}


def call(call_id: str, name: str, arguments: str) -> Json:
    return {"toolCall": {"callId": call_id, "name": name, "argumentsJson": arguments}}


def image(uri: str, media_type: str) -> Json:
    return {"image": {"uri": uri, "mediaType": media_type}}


def usage(inputs: int, outputs: int, read: int = 0, write: int = 0) -> Json:
    counts = {
        "inputTokens": inputs,
        "outputTokens": outputs,
        "cacheReadTokens": read,
        "cacheWriteTokens": write,
    }
    return {key: value for key, value in counts.items() if value}


def result(call_id: str, *content: Json, is_error: bool = False) -> Json:
    entry: Json = {"callId": call_id, "content": list(content)}
    if is_error:
        entry["isError"] = True
    return entry


def output(blocks: list[Json], used: Json, results: list[Json] = ()) -> Json:  # type: ignore[assignment]
    step: Json = {
        "admissionId": ADMISSION_ID,
        "assistant": {"role": "MESSAGE_ROLE_ASSISTANT", "content": blocks},
    }
    if results:
        step["toolResults"] = list(results)
    step["usage"] = used
    return step


def sse(*events: Json, done: bool = False, named: bool = False) -> list[Json]:
    """Server-sent events: ``data`` lines (OpenAI Chat), or ``event:`` + ``data`` (Anthropic,
    Responses: the event name is the payload's ``type``)."""
    out: list[Json] = [
        {"event": event["type"], "data": event} if named else {"data": event} for event in events
    ]
    if done:
        out.append({"data": "[DONE]"})
    return out


# ---- OpenAI Chat Completions ------------------------------------------------------------------


def chat_completion(message: Json, usage: Json, finish: str = "tool_calls") -> Json:
    return {
        "id": "chatcmpl-fixture",
        "object": "chat.completion",
        "created": 1764547200,
        "model": "gpt-5.1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }


def chunk(delta: Json, finish: str | None = None, model: str = "gpt-5.1") -> Json:
    return {
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(usage: Json, model: str = "gpt-5.1") -> Json:
    return {
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": model,
        "choices": [],
        "usage": usage,
    }


READ_ARGS = '{"path":"src/main.py"}'
CHAT_CASES: list[Json] = [
    {
        "name": "openai-chat-parallel-tool-calls",
        "description": "two tool calls beside text; cached prompt tokens; a text and an error",
        "wire_format": "openai_chat",
        "provider": "openai",
        "response": chat_completion(
            {
                "role": "assistant",
                "content": "Reading both.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_a1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                    },
                    {
                        "id": "call_b2",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "b.py" }'},
                    },
                ],
            },
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        ),
        "tool_results": [
            {"call_id": "call_a1", "text": "print('a')"},
            {"call_id": "call_b2", "error": {"name": "FileNotFoundError", "message": "b.py"}},
        ],
        "step_output": output(
            [
                text("Reading both."),
                call("call_a1", "read_file", '{"path":"a.py"}'),
                call("call_b2", "read_file", '{"path": "b.py" }'),
            ],
            usage(2006, 300, 1920),
            [
                result("call_a1", text("print('a')")),
                result("call_b2", text("FileNotFoundError: b.py"), is_error=True),
            ],
        ),
    },
    {
        "name": "openai-chat-stream-tool-call",
        "description": "a streamed tool call, arguments in pieces; the usage chunk; a JSON result",
        "wire_format": "openai_chat",
        "provider": "openai",
        "stream": sse(
            chunk({"role": "assistant", "content": "", "refusal": None}),
            chunk({"content": "Let me "}),
            chunk({"content": "look."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_s1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"src/main.py"}'}}]}),
            chunk({}, finish="tool_calls"),
            usage_chunk(
                {
                    "prompt_tokens": 812,
                    "completion_tokens": 25,
                    "total_tokens": 837,
                    "prompt_tokens_details": {"cached_tokens": 768},
                }
            ),
            done=True,
        ),
        "tool_results": [
            {
                "call_id": "call_s1",
                "json": {
                    "lines": 3,
                    "ratio": 0.5,
                    "big": 1e21,
                    "ok": True,
                    "name": "café",
                    "nested": [1.0, None, "\n"],
                },
            },
        ],
        "step_output": output(
            [text("Let me look."), call("call_s1", "read_file", READ_ARGS)],
            usage(812, 25, 768),
            [
                result(
                    "call_s1",
                    text(
                        '{"lines":3,"ratio":0.5,"big":1e+21,"ok":true,"name":"café",'
                        '"nested":[1,null,"\\n"]}'
                    ),
                )
            ],
        ),
    },
    {
        "name": "deepseek-chat-reasoning-tool-call",
        "description": "DeepSeek's reasoning_content and cache hit/miss counts; an image result",
        "wire_format": "openai_chat",
        "provider": "deepseek",
        "response": {
            **chat_completion(
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "The user wants a screenshot; call the tool.",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_00_ds",
                            "type": "function",
                            "function": {"name": "screenshot", "arguments": "{}"},
                        }
                    ],
                },
                {
                    "prompt_tokens": 1300,
                    "completion_tokens": 60,
                    "total_tokens": 1360,
                    "prompt_tokens_details": {"cached_tokens": 1280},
                    "prompt_cache_hit_tokens": 1280,
                    "prompt_cache_miss_tokens": 20,
                    "completion_tokens_details": {"reasoning_tokens": 40},
                },
            ),
            "model": "deepseek-v4-flash",
            "system_fingerprint": "fp_ds",
        },
        "tool_results": [
            {
                "call_id": "call_00_ds",
                "parts": [{"text": "screen:"}, {"image": {"uri": PNG, "media_type": "image/png"}}],
            }
        ],
        "step_output": output(
            [
                reasoning("The user wants a screenshot; call the tool."),
                call("call_00_ds", "screenshot", "{}"),
            ],
            usage(1300, 60, 1280),
            [result("call_00_ds", text("screen:"), image(PNG, "image/png"))],
        ),
    },
    {
        "name": "deepseek-chat-stream-reasoning",
        "description": "streamed reasoning_content deltas, then the answer; a cache miss",
        "wire_format": "openai_chat",
        "provider": "deepseek",
        "stream": sse(
            chunk(
                {"role": "assistant", "content": None, "reasoning_content": ""},
                model="deepseek-v4-flash",
            ),
            chunk({"content": None, "reasoning_content": "Two plus "}, model="deepseek-v4-flash"),
            chunk(
                {"content": None, "reasoning_content": "two is four."}, model="deepseek-v4-flash"
            ),
            chunk({"content": "4", "reasoning_content": None}, model="deepseek-v4-flash"),
            chunk(
                {"content": "", "reasoning_content": None}, finish="stop", model="deepseek-v4-flash"
            ),
            usage_chunk(
                {
                    "prompt_tokens": 64,
                    "completion_tokens": 9,
                    "total_tokens": 73,
                    "prompt_cache_hit_tokens": 0,
                    "prompt_cache_miss_tokens": 64,
                },
                model="deepseek-v4-flash",
            ),
            done=True,
        ),
        "tool_results": [],
        "step_output": output([reasoning("Two plus two is four."), text("4")], usage(64, 9)),
    },
]

# ---- OpenAI Responses -------------------------------------------------------------------------


def response(output_items: list[Json], usage: Json, status: str = "completed") -> Json:
    return {
        "id": "resp_fixture",
        "object": "response",
        "created_at": 1764547200,
        "model": "gpt-5.1",
        "status": status,
        "output": output_items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def responses_usage(inputs: int, outputs: int, cached: int) -> Json:
    return {
        "input_tokens": inputs,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": outputs,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": inputs + outputs,
    }


ENCRYPTED = "gAAAAABpLm9rZW4tZW5jcnlwdGVkLXJlYXNvbmluZw=="
REASONING_ITEM = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Need the file first."}],
    "encrypted_content": ENCRYPTED,
}
MESSAGE_ITEM = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "phase": "commentary",
    "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}],
}
CALL_ITEM = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_r1",
    "name": "read_file",
    "arguments": READ_ARGS,
    "status": "completed",
}
# What the response gives, streamed or not.
RESPONSES_STEP = output(
    [
        reasoning_item("rs_1", ENCRYPTED, ["Need the file first."]),
        text("Reading it.", "commentary"),
        call("call_r1", "read_file", READ_ARGS),
    ],
    usage(3000, 80, 2816),
    [result("call_r1", text("print('hi')"))],
)
COMPLETED = response([REASONING_ITEM, MESSAGE_ITEM, CALL_ITEM], responses_usage(3000, 80, 2816))
RESPONSES_CASES: list[Json] = [
    {
        "name": "openai-responses-reasoning-message-call",
        "description": "an encrypted reasoning item, a commentary message, a call; cached input",
        "wire_format": "openai_responses",
        "provider": "openai",
        "response": COMPLETED,
        "tool_results": [{"call_id": "call_r1", "text": "print('hi')"}],
        "step_output": RESPONSES_STEP,
    },
    {
        "name": "openai-responses-stream",
        "description": "the same response streamed: items, text and argument deltas, completed",
        "wire_format": "openai_responses",
        "provider": "openai",
        "stream": sse(
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": {**COMPLETED, "status": "in_progress", "output": [], "usage": None},
            },
            {
                "type": "response.output_item.added",
                "sequence_number": 1,
                "output_index": 0,
                "item": {**REASONING_ITEM, "summary": [], "encrypted_content": None},
            },
            {
                "type": "response.output_item.done",
                "sequence_number": 2,
                "output_index": 0,
                "item": REASONING_ITEM,
            },
            {
                "type": "response.output_item.added",
                "sequence_number": 3,
                "output_index": 1,
                "item": {**MESSAGE_ITEM, "status": "in_progress", "content": []},
            },
            {
                "type": "response.content_part.added",
                "sequence_number": 4,
                "output_index": 1,
                "item_id": "msg_1",
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            },
            {
                "type": "response.output_text.delta",
                "sequence_number": 5,
                "output_index": 1,
                "item_id": "msg_1",
                "content_index": 0,
                "delta": "Reading ",
                "logprobs": [],
            },
            {
                "type": "response.output_text.delta",
                "sequence_number": 6,
                "output_index": 1,
                "item_id": "msg_1",
                "content_index": 0,
                "delta": "it.",
                "logprobs": [],
            },
            {
                "type": "response.output_text.done",
                "sequence_number": 7,
                "output_index": 1,
                "item_id": "msg_1",
                "content_index": 0,
                "text": "Reading it.",
                "logprobs": [],
            },
            {
                "type": "response.output_item.done",
                "sequence_number": 8,
                "output_index": 1,
                "item": MESSAGE_ITEM,
            },
            {
                "type": "response.output_item.added",
                "sequence_number": 9,
                "output_index": 2,
                "item": {**CALL_ITEM, "arguments": "", "status": "in_progress"},
            },
            {
                "type": "response.function_call_arguments.delta",
                "sequence_number": 10,
                "output_index": 2,
                "item_id": "fc_1",
                "delta": '{"path":',
            },
            {
                "type": "response.function_call_arguments.delta",
                "sequence_number": 11,
                "output_index": 2,
                "item_id": "fc_1",
                "delta": '"src/main.py"}',
            },
            {
                "type": "response.function_call_arguments.done",
                "sequence_number": 12,
                "output_index": 2,
                "item_id": "fc_1",
                "name": "read_file",
                "arguments": READ_ARGS,
            },
            {
                "type": "response.output_item.done",
                "sequence_number": 13,
                "output_index": 2,
                "item": CALL_ITEM,
            },
            {"type": "response.completed", "sequence_number": 14, "response": COMPLETED},
            named=True,
        ),
        "tool_results": [{"call_id": "call_r1", "text": "print('hi')"}],
        "step_output": RESPONSES_STEP,
    },
]

# ---- Anthropic Messages ------------------------------------------------------------------------


def message(content: list[Json], usage: Json, stop: str | None = "tool_use") -> Json:
    return {
        "id": "msg_fixture",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


ANTHROPIC_USAGE = {
    "input_tokens": 50,
    "output_tokens": 120,
    "cache_read_input_tokens": 4000,
    "cache_creation_input_tokens": 300,
}
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
TOOL_INPUT = {"path": "src/main.py", "range": [1, 20.5], "opts": {"follow": True, "encoding": None}}
TOOL_INPUT_JSON = '{"path":"src/main.py","range":[1,20.5],"opts":{"follow":true,"encoding":null}}'
# What the message gives, streamed or not (before its tool results).
ANTHROPIC_CONTENT = (
    [
        reasoning("I should read the file.", SIGNATURE),
        redacted(REDACTED),
        text("Reading src/main.py."),
        call("toolu_01A", "read_file", TOOL_INPUT_JSON),
    ],
    usage(50, 120, 4000, 300),
)
ANTHROPIC_CASES: list[Json] = [
    {
        "name": "anthropic-thinking-tool-use",
        "description": "signed thinking, text, a tool_use with nested input; cache read, write",
        "wire_format": "anthropic_messages",
        "provider": "anthropic",
        "response": message(
            [
                {"type": "thinking", "thinking": "I should read the file.", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "text", "text": "Reading src/main.py.", "citations": None},
                {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": TOOL_INPUT},
            ],
            ANTHROPIC_USAGE,
        ),
        "tool_results": [
            {"call_id": "toolu_01A", "image": {"uri": PNG, "media_type": "image/png"}},
        ],
        "step_output": output(
            *ANTHROPIC_CONTENT,
            [result("toolu_01A", image(PNG, "image/png"))],
        ),
    },
    {
        "name": "anthropic-stream-thinking-tool-use",
        "description": "the same message streamed: thinking, signature deltas, partial input JSON",
        "wire_format": "anthropic_messages",
        "provider": "anthropic",
        "stream": sse(
            {
                "type": "message_start",
                "message": message([], {**ANTHROPIC_USAGE, "output_tokens": 1}, stop=None),
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "I should read "},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "the file."},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": SIGNATURE},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "redacted_thinking", "data": REDACTED},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "text_delta", "text": "Reading src/main.py."},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "content_block_start",
                "index": 3,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "read_file",
                    "input": {},
                },
            },
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {
                    "type": "input_json_delta",
                    "partial_json": '{"path": "src/main.py", "range": [1, ',
                },
            },
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {
                    "type": "input_json_delta",
                    "partial_json": '20.5], "opts": {"follow": true, "encoding": null}}',
                },
            },
            {"type": "content_block_stop", "index": 3},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 120},
            },
            {"type": "message_stop"},
            named=True,
        ),
        "tool_results": [
            {"call_id": "toolu_01A", "text": "permission denied", "is_error": True},
        ],
        "step_output": output(
            *ANTHROPIC_CONTENT,
            [result("toolu_01A", text("permission denied"), is_error=True)],
        ),
    },
    {
        "name": "anthropic-answer",
        "description": "a plain answer ending the turn: no tool calls, no cache fields",
        "wire_format": "anthropic_messages",
        "provider": "anthropic",
        "response": message(
            [{"type": "text", "text": "It prints hi."}],
            {"input_tokens": 900, "output_tokens": 7},
            stop="end_turn",
        ),
        "tool_results": [],
        "step_output": output([text("It prints hi.")], usage(900, 7)),
    },
]

CASES = CHAT_CASES + RESPONSES_CASES + ANTHROPIC_CASES


# ---- the agent loops' recorded responses (test_harness_loop.py, kitLoop.test.ts) -------------


def _chat(content: str | None, calls: list[tuple[str, str]], reasoning: str | None) -> Json:
    message: Json = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
            }
            for call_id, path in calls
        ]
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    usage = {
        "prompt_tokens": 900,
        "completion_tokens": 40,
        "total_tokens": 940,
        "prompt_tokens_details": {"cached_tokens": 768},
    }
    return {"response": chat_completion(message, usage, "tool_calls" if calls else "stop")}


def chat_replies(reasoning: bool) -> list[Json]:
    think = "Need the file." if reasoning else None
    return [
        _chat("Reading it.", [("call_1", "main.py")], think),
        _chat("main.py prints hi.", [], think),
        _chat(None, [("call_2", "a.py"), ("call_3", "b.py")], think),
        _chat("Plan: merge a and b.", [], think),
        _chat("Nothing is left.", [], think),
    ]


def _responses(text: str, calls: list[tuple[str, str]]) -> Json:
    items: list[Json] = [{**REASONING_ITEM, "id": f"rs_{text[:4]}"}]
    items.append(
        {**MESSAGE_ITEM, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    )
    items += [
        {
            **CALL_ITEM,
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "arguments": json.dumps({"path": path}),
        }
        for call_id, path in calls
    ]
    return {"response": response(items, responses_usage(900, 40, 768))}


def responses_replies() -> list[Json]:
    return [
        _responses("Reading it.", [("call_1", "main.py")]),
        _responses("main.py prints hi.", []),
        _responses("Reading both.", [("call_2", "a.py"), ("call_3", "b.py")]),
        _responses("Plan: merge a and b.", []),
        _responses("Nothing is left.", []),
    ]


def _message(text: str, calls: list[tuple[str, str]]) -> Json:
    content: list[Json] = [
        {"type": "thinking", "thinking": f"Thinking about {text}", "signature": LOOP_SIGNATURE},
        {"type": "text", "text": text},
    ]
    content += [
        {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": path}}
        for call_id, path in calls
    ]
    return {"response": message(content, ANTHROPIC_USAGE, "tool_use" if calls else "end_turn")}


def anthropic_replies() -> list[Json]:
    return [
        _message("Reading it.", [("toolu_1", "main.py")]),
        _message("main.py prints hi.", []),
        _message("Reading both.", [("toolu_2", "a.py"), ("toolu_3", "b.py")]),
        _message("Plan: merge a and b.", []),
        _message("Nothing is left.", []),
    ]


LOOP_SIGNATURE = "EqQBCkYIBRgCKkDsig=="
# Each loop's replies, in order: turn 1 (a call, an answer), turn 2 (two parallel calls, one of
# them failing, an answer), and after a compaction turn 3 (an answer).
LOOPS: dict[str, list[Json]] = {
    "openai-openai_chat": chat_replies(reasoning=False),
    "deepseek-openai_chat": chat_replies(reasoning=True),
    "openai-openai_responses": responses_replies(),
    "anthropic-anthropic_messages": anthropic_replies(),
}
LOOP_DIRECTORY = DIRECTORY / "loops"


def with_bytes(case: Json) -> Json:
    step = json_format.ParseDict(case["step_output"], api.StepOutput())
    encoded = base64.b64encode(step.SerializeToString()).decode("ascii")
    return {**case, "step_output_base64": encoded}


def rendered() -> dict[str, str]:
    """Each fixture file's path (under DIRECTORY) and text, as this module writes them."""
    files = {f"{case['name']}.json": with_bytes(case) for case in CASES}
    files |= {f"loops/{name}.json": {"replies": replies} for name, replies in LOOPS.items()}
    return {
        name: json.dumps(value, indent=2, ensure_ascii=False) + "\n"
        for name, value in files.items()
    }


def on_disk() -> dict[str, str]:
    return {
        str(path.relative_to(DIRECTORY)): path.read_text() for path in DIRECTORY.rglob("*.json")
    }


def load() -> list[Json]:
    return [json.loads(path.read_text()) for path in sorted(DIRECTORY.glob("*.json"))]


def main() -> None:
    for stale in DIRECTORY.rglob("*.json"):
        stale.unlink()
    for name, content in rendered().items():
        (DIRECTORY / name).parent.mkdir(parents=True, exist_ok=True)
        (DIRECTORY / name).write_text(content)


if __name__ == "__main__":
    main()
