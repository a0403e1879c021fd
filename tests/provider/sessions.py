"""Derived requests of ordinary agent sessions, as the provider tests feed them to the SDKs."""

from __future__ import annotations

from dataclasses import dataclass

from admission_service.domain.messages import (
    Block,
    Image,
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    system_message,
    user_text,
)

# A 1x1 PNG.
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4"
    "DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)
TOOLS = (
    Tool(
        "read_file",
        "Read a file",
        '{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}',
    ),
    Tool("list_dir", "", ""),
)
PROVIDERS = ("deepseek", "anthropic", "openai")


def assistant(*blocks: Block) -> Message:
    return Message(Role.ASSISTANT, blocks)


def result(call_id: str, *content: Text | Image, is_error: bool = False) -> Message:
    return Message(Role.TOOL, (ToolResult(call_id, content, is_error),))


def call(call_id: str, path: str = "main.py") -> ToolCall:
    return ToolCall(call_id, "read_file", f'{{"path":"{path}"}}')


@dataclass(frozen=True)
class Session:
    name: str
    messages: tuple[Message, ...]
    in_history: bool = True
    images: bool = False  # DeepSeek's Anthropic-compatible API refuses these

    def __str__(self) -> str:
        return self.name


SESSIONS = (
    Session(
        "single-tool-call",
        (
            system_message("You are careful."),
            user_text("Explain main.py"),
            assistant(Text("Reading it."), call("c1")),
            result("c1", Text("print('hi')")),
            assistant(Text("It prints hi.")),
        ),
        in_history=False,
    ),
    Session(
        "parallel-tool-calls-and-an-error",
        (
            system_message("You are careful."),
            user_text("Compare a.py and b.py"),
            assistant(call("c1", "a.py"), call("c2", "b.py")),
            result("c1", Text("A")),
            result("c2", Text("no such file"), is_error=True),
            user_text("b.py is in src/"),
            assistant(call("c3", "src/b.py")),
            result("c3", Text("B")),
            assistant(Text("They differ.")),
        ),
        in_history=False,
    ),
    Session(
        "images-by-url-and-data-uri",
        (
            system_message("You see images."),
            Message(
                Role.USER,
                (
                    Text("What is in these?"),
                    Image("https://example.com/cat.png", "image/png"),
                    Image(PNG, "image/png"),
                ),
            ),
            assistant(Text("Taking a screenshot."), ToolCall("c1", "list_dir", "{}")),
            result("c1", Text("screenshot:"), Image(PNG, "image/png")),
            assistant(Text("A cat and a pixel.")),
        ),
        in_history=False,
        images=True,
    ),
    Session(
        "reasoning-with-and-without-signature",
        (
            system_message("Think first."),
            user_text("2+2?"),
            assistant(Reasoning("Simple sum."), Text("4")),
            user_text("Now read main.py"),
            assistant(Reasoning("Need the file.", "EqQBCkYIBRgCKkDsig=="), call("c1")),
            result("c1", Text("print(4)")),
            assistant(Reasoning("Only thinking, no answer yet.")),
            user_text("Well?"),
            assistant(Text("It prints 4.")),
        ),
        in_history=False,
    ),
    Session(
        "reasoning-that-travels-back-and-an-empty-result",
        (
            system_message("Think first."),
            user_text("Read main.py"),
            assistant(
                Reasoning("Need the file.", "EqQBCkYIBRgCKkDsig=="),
                RedactedReasoning("anthropic", "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"),
                ReasoningItem("rs_1", "gAAAAABoZ2VuY3J5cHRlZA==", ("Read it first.",)),
                Text("Reading.", "commentary"),
                call("c1"),
            ),
            result("c1", Text("print(4)")),
            assistant(
                ReasoningItem("rs_2", "gAAAAABzZWNvbmQ="), Text("It prints 4.", "final_answer")
            ),
            user_text("Touch it."),
            assistant(ToolCall("c2", "list_dir", "{}")),
            result("c2"),
            assistant(Text("Done.")),
        ),
        in_history=False,
    ),
    Session(
        "in-history-prompt-changes",
        (
            system_message("A"),
            user_text("start"),
            assistant(Text("ok"), call("c1")),
            result("c1", Text("data")),
            system_message("A + plan mode"),
            user_text("plan it"),
            assistant(call("c2")),
            result("c2", Text("more")),
            system_message("A + plan mode + skill"),
            assistant(Text("Here is the plan.")),
        ),
    ),
    Session(
        "consolidated-after-compaction",
        (
            system_message("A + plan mode"),
            user_text("Summary of the conversation so far: read main.py, planned a refactor."),
            user_text("Go ahead."),
            assistant(Text("Done."), call("c9")),
            result("c9", Text("ok")),
        ),
        in_history=False,
    ),
    Session(
        "empty-texts",
        (
            system_message("A"),
            Message(Role.USER, (Text(""), Text("hello"))),
            assistant(Text(""), call("c1")),
            result("c1", Text("")),
            user_text(""),
            assistant(Text("bye")),
        ),
        in_history=False,
    ),
)
