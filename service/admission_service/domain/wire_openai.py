"""OpenAI's Chat Completions ``messages`` and Responses ``input`` (docs/WIRE_FORMATS.md).

Chat: later system messages stay in place as role ``system``; an assistant's tool calls are
followed by one ``tool`` message per result. DeepSeek's chat API (``provider == "deepseek"``)
takes reasoning back as ``reasoning_content``; OpenAI's has no input field for it.

Responses: later system messages go as role ``developer``; an assistant's blocks become items
in their order: a run of text an input message (``{"role": "assistant", "content": text}``, with
its ``phase``), each tool call a ``function_call`` item, each reasoning item (``ReasoningItem``,
the provider's id and encrypted content) a ``reasoning`` item before the item that followed it;
each result a ``function_call_output`` item. Reasoning without an item id is not sent (only
the provider issues ids).

What a format has no place for is listed in ``Omissions`` (DerivedRequest.omitted), never
dropped unreported: opaque reasoning and phases on chat, other reasoning on Responses.

Neither format has an error flag on a tool result: the result's text, which Record requires to
describe the failure, is the output.
"""

from __future__ import annotations

from collections.abc import Sequence

from admission_service.domain import messages as msg
from admission_service.domain.wire_common import (
    Json,
    Omissions,
    WireFormat,
    check_media_type,
    check_tool_name,
    result_text,
    tool_schema,
)

CHAT = WireFormat.OPENAI_CHAT
RESPONSES = WireFormat.OPENAI_RESPONSES

# The providers whose chat API takes an assistant's reasoning back as ``reasoning_content``.
REASONING_CONTENT_PROVIDERS = frozenset({"deepseek"})


def openai_chat(
    messages: Sequence[msg.Message],
    *,
    provider: str,
    offset: int,
    omitted: Omissions,
) -> Json:
    out: list[Json] = []
    # Chat's tool messages hold text only: images a tool returned follow the run of tool
    # messages in one user message, so every tool message still directly follows its call.
    tool_images: list[Json] = []
    for index, message in enumerate(messages, start=offset):
        where = f"messages[{index}]"
        if message.role is not msg.Role.TOOL and tool_images:
            out.append({"role": "user", "content": tool_images})
            tool_images = []
        if message.role is msg.Role.SYSTEM:
            out.append({"role": "system", "content": message.text})
        elif message.role is msg.Role.USER:
            out.append({"role": "user", "content": _chat_user_content(message, where)})
        elif message.role is msg.Role.ASSISTANT:
            entry = _chat_assistant(message, provider, where, omitted)
            if entry is not None:
                out.append(entry)
        else:
            for position, block in enumerate(message.content):
                assert isinstance(block, msg.ToolResult)
                out.append(
                    {"role": "tool", "tool_call_id": block.call_id, "content": result_text(block)}
                )
                inner = f"{where}.content[{position}].tool_result"
                tool_images.extend(
                    _chat_image(image, f"{inner}.content[{k}]")
                    for k, image in enumerate(block.content)
                    if isinstance(image, msg.Image)
                )
    if tool_images:
        out.append({"role": "user", "content": tool_images})
    return {"messages": out}


def chat_tools(tools: Sequence[msg.Tool]) -> list[Json]:
    """A Chat Completions body's ``tools``."""
    return [_chat_tool(index, tool) for index, tool in enumerate(tools)]


def _chat_image(image: msg.Image, where: str) -> Json:
    check_media_type(CHAT, where, image)
    return {"type": "image_url", "image_url": {"url": image.uri}}


def _chat_user_content(message: msg.Message, where: str) -> str | list[Json]:
    if len(message.content) == 1 and isinstance(message.content[0], msg.Text):
        return message.content[0].text
    parts: list[Json] = []
    for index, block in enumerate(message.content):
        if isinstance(block, msg.Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, msg.Image):
            parts.append(_chat_image(block, f"{where}.content[{index}]"))
    return parts


def _chat_assistant(
    message: msg.Message, provider: str, where: str, omitted: Omissions
) -> Json | None:
    """The assistant entry; None when nothing of it is expressible on this route (reasoning
    alone, on a provider that takes no reasoning back), like an empty assistant."""
    takes_reasoning = provider in REASONING_CONTENT_PROVIDERS
    for index, block in enumerate(message.content):
        field = f"{where}.content[{index}]"
        if isinstance(block, msg.Text):
            omitted.phase(CHAT, field, block)
        elif isinstance(block, msg.Reasoning) and block.text and not takes_reasoning:
            omitted.omit(field, f"the {provider} chat API takes no reasoning back")
        elif isinstance(block, msg.RedactedReasoning | msg.ReasoningItem):
            omitted.omit(field, "Chat Completions has no place for opaque reasoning")
    text = "".join(b.text for b in message.content if isinstance(b, msg.Text))
    reasoning = "".join(b.text for b in message.content if isinstance(b, msg.Reasoning))
    calls = message.tool_calls()
    with_reasoning = bool(reasoning) and takes_reasoning
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
    check_tool_name(CHAT, index, tool)
    function: Json = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool_schema(tool)
    return {"type": "function", "function": function}


def openai_responses(
    messages: Sequence[msg.Message],
    *,
    offset: int,
    omitted: Omissions,
) -> Json:
    items: list[Json] = []
    for index, message in enumerate(messages, start=offset):
        where = f"messages[{index}]"
        if message.role is msg.Role.SYSTEM:
            role = "system" if index == 0 else "developer"
            items.append({"role": role, "content": message.text})
        elif message.role is msg.Role.USER:
            content = _responses_content(message.content, where)
            items.append({"role": "user", "content": content})
        elif message.role is msg.Role.ASSISTANT:
            items.extend(_responses_assistant(message, where, omitted))
        else:
            for position, block in enumerate(message.content):
                assert isinstance(block, msg.ToolResult)
                output: str | list[Json] = result_text(block)
                if any(isinstance(inner, msg.Image) for inner in block.content):
                    inner_where = f"{where}.content[{position}].tool_result"
                    output = _responses_content(block.content, inner_where)
                items.append(
                    {"type": "function_call_output", "call_id": block.call_id, "output": output}
                )
    return {"input": items}


def responses_tools(tools: Sequence[msg.Tool]) -> list[Json]:
    """A Responses body's ``tools``."""
    return [_responses_tool(index, tool) for index, tool in enumerate(tools)]


def _responses_assistant(message: msg.Message, where: str, omitted: Omissions) -> list[Json]:
    """The assistant's items in block order: adjacent texts of one phase join into one input
    message (empty text carries nothing), each reasoning item goes just before the item that
    followed it in the output (the API refuses one with nothing after it)."""
    items: list[Json] = []
    waiting: list[tuple[int, Json]] = []  # reasoning items, until the item they preceded

    def emit(item: Json) -> None:
        items.extend(reasoning for _, reasoning in waiting)
        waiting.clear()
        items.append(item)

    run: list[msg.Text] = []

    def close_run() -> None:
        text = "".join(block.text for block in run)
        if text:
            item: Json = {"role": "assistant", "content": text}
            if run[0].phase:
                item["phase"] = run[0].phase
            emit(item)
        run.clear()

    for index, block in enumerate(message.content):
        field = f"{where}.content[{index}]"
        if isinstance(block, msg.Text):
            if run and run[0].phase != block.phase:
                close_run()
            run.append(block)
            continue
        close_run()
        if isinstance(block, msg.ToolCall):
            emit(
                {
                    "type": "function_call",
                    "call_id": block.call_id,
                    "name": block.name,
                    "arguments": block.arguments_json or "{}",
                }
            )
        elif isinstance(block, msg.ReasoningItem):
            waiting.append((index, _reasoning_item(block)))
        elif isinstance(block, msg.Reasoning) and block.text:
            omitted.omit(field, "Responses takes reasoning back only as a reasoning item")
        elif isinstance(block, msg.RedactedReasoning):
            omitted.omit(field, "Responses has no place for another provider's opaque reasoning")
    close_run()
    for index, _ in waiting:
        omitted.omit(
            f"{where}.content[{index}]",
            "a reasoning item goes back only before the item that followed it",
        )
    return items


def _reasoning_item(block: msg.ReasoningItem) -> Json:
    item: Json = {
        "type": "reasoning",
        "id": block.item_id,
        "summary": [{"type": "summary_text", "text": text} for text in block.summary],
    }
    if block.content:
        item["content"] = [{"type": "reasoning_text", "text": text} for text in block.content]
    if block.encrypted_content:
        item["encrypted_content"] = block.encrypted_content
    return item


def _responses_content(content: Sequence[object], where: str) -> list[Json]:
    parts: list[Json] = []
    for index, block in enumerate(content):
        if isinstance(block, msg.Text):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, msg.Image):
            check_media_type(RESPONSES, f"{where}.content[{index}]", block)
            parts.append({"type": "input_image", "image_url": block.uri, "detail": "auto"})
    return parts


def _responses_tool(index: int, tool: msg.Tool) -> Json:
    check_tool_name(RESPONSES, index, tool)
    entry: Json = {"type": "function", "name": tool.name}
    if tool.description:
        entry["description"] = tool.description
    # strict: false keeps the harness's schema as it is (strict mode accepts only a subset
    # of JSON Schema and would reject many ordinary schemas).
    entry["parameters"] = tool_schema(tool)
    entry["strict"] = False
    return entry
