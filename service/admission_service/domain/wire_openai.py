"""OpenAI's Chat Completions ``messages`` and Responses ``input`` (docs/WIRE_FORMATS.md).

Chat: later system messages stay in place as role ``system``; an assistant's tool calls are
followed by one ``tool`` message per result. DeepSeek's chat API (``provider == "deepseek"``)
takes reasoning back as ``reasoning_content``; OpenAI's has no input field for it.

Responses: later system messages go as role ``developer``; assistant text is an input message
(``{"role": "assistant", "content": text}``), each tool call a ``function_call`` item and each
result a ``function_call_output`` item. Reasoning items carry ids only the provider issues, so
stored reasoning is not sent.

Neither format has an error flag on a tool result: the result's text, which Record requires to
describe the failure, is the output.
"""

from __future__ import annotations

from collections.abc import Sequence

from admission_service.domain import messages as msg
from admission_service.domain.wire_common import (
    Json,
    WireFormat,
    check_tool_name,
    result_images,
    result_text,
    tool_schema,
)

# The providers whose chat API takes an assistant's reasoning back as ``reasoning_content``.
REASONING_CONTENT_PROVIDERS = frozenset({"deepseek"})


def openai_chat(
    messages: Sequence[msg.Message], *, provider: str, tools: Sequence[msg.Tool], offset: int
) -> Json:
    out: list[Json] = []
    # Chat's tool messages hold text only: images a tool returned follow the run of tool
    # messages in one user message, so every tool message still directly follows its call.
    tool_images: list[Json] = []
    for message in messages:
        if message.role is not msg.Role.TOOL and tool_images:
            out.append({"role": "user", "content": tool_images})
            tool_images = []
        if message.role is msg.Role.SYSTEM:
            out.append({"role": "system", "content": message.text})
        elif message.role is msg.Role.USER:
            out.append({"role": "user", "content": _chat_user_content(message)})
        elif message.role is msg.Role.ASSISTANT:
            entry = _chat_assistant(message, provider)
            if entry is not None:
                out.append(entry)
        else:
            for block in message.content:
                assert isinstance(block, msg.ToolResult)
                out.append(
                    {"role": "tool", "tool_call_id": block.call_id, "content": result_text(block)}
                )
                tool_images.extend(_chat_image(image) for image in result_images(block))
    if tool_images:
        out.append({"role": "user", "content": tool_images})
    body: Json = {"messages": out}
    if tools:
        body["tools"] = [_chat_tool(index, tool) for index, tool in enumerate(tools)]
    return body


def _chat_image(image: msg.Image) -> Json:
    return {"type": "image_url", "image_url": {"url": image.uri}}


def _chat_user_content(message: msg.Message) -> str | list[Json]:
    if len(message.content) == 1 and isinstance(message.content[0], msg.Text):
        return message.content[0].text
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, msg.Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, msg.Image):
            parts.append(_chat_image(block))
    return parts


def _chat_assistant(message: msg.Message, provider: str) -> Json | None:
    """The assistant entry; None when nothing of it is expressible on this route (reasoning
    alone, on a provider that takes no reasoning back), like an empty assistant."""
    text = "".join(b.text for b in message.content if isinstance(b, msg.Text))
    reasoning = "".join(b.text for b in message.content if isinstance(b, msg.Reasoning))
    calls = message.tool_calls()
    with_reasoning = bool(reasoning) and provider in REASONING_CONTENT_PROVIDERS
    if not text and not calls and not with_reasoning:
        return None
    entry: Json = {"role": "assistant", "content": text or ("" if not calls else None)}
    if with_reasoning:
        entry["reasoning_content"] = reasoning
    if calls:
        entry["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json or "{}"},
            }
            for call in calls
        ]
    return entry


def _chat_tool(index: int, tool: msg.Tool) -> Json:
    check_tool_name(WireFormat.OPENAI_CHAT, index, tool)
    function: Json = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool_schema(tool)
    return {"type": "function", "function": function}


def openai_responses(
    messages: Sequence[msg.Message], *, tools: Sequence[msg.Tool], offset: int
) -> Json:
    items: list[Json] = []
    for index, message in enumerate(messages, start=offset):
        if message.role is msg.Role.SYSTEM:
            role = "system" if index == 0 else "developer"
            items.append({"role": role, "content": message.text})
        elif message.role is msg.Role.USER:
            items.append({"role": "user", "content": _responses_content(message.content)})
        elif message.role is msg.Role.ASSISTANT:
            text = "".join(b.text for b in message.content if isinstance(b, msg.Text))
            if text:
                items.append({"role": "assistant", "content": text})
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments_json or "{}",
                }
                for call in message.tool_calls()
            )
        else:
            for block in message.content:
                assert isinstance(block, msg.ToolResult)
                output: str | list[Json] = result_text(block)
                if result_images(block):
                    output = _responses_content(block.content)
                items.append(
                    {"type": "function_call_output", "call_id": block.call_id, "output": output}
                )
    body: Json = {"input": items}
    if tools:
        body["tools"] = [_responses_tool(index, tool) for index, tool in enumerate(tools)]
    return body


def _responses_content(content: Sequence[object]) -> list[Json]:
    parts: list[Json] = []
    for block in content:
        if isinstance(block, msg.Text):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, msg.Image):
            parts.append({"type": "input_image", "image_url": block.uri, "detail": "auto"})
    return parts


def _responses_tool(index: int, tool: msg.Tool) -> Json:
    check_tool_name(WireFormat.OPENAI_RESPONSES, index, tool)
    entry: Json = {"type": "function", "name": tool.name}
    if tool.description:
        entry["description"] = tool.description
    # strict: false keeps the harness's schema as it is (strict mode accepts only a subset
    # of JSON Schema and would reject many ordinary schemas).
    entry["parameters"] = tool_schema(tool)
    entry["strict"] = False
    return entry
