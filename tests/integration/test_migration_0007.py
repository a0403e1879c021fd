"""Migration 0007 (issue 25): the new reasoning blocks need nothing to upgrade, and the downgrade
leaves rows the release before reads — its code would read an unknown block kind as an empty
tool result — by removing those blocks and phases from assistant messages, and only there."""

from __future__ import annotations

from admission_service.domain.messages import (
    Message,
    Reasoning,
    ReasoningItem,
    RedactedReasoning,
    Role,
    Text,
    ToolCall,
)
from admission_service.storage import codec
from admission_service.storage.engine import alembic_config
from alembic import command
from sqlalchemy import text

from .test_migrations import connect, rows

OPAQUE = RedactedReasoning("anthropic", "EmwKAhgBEgy3va3pzix")
ITEM = ReasoningItem("rs_1", "gAAAAAB", ("plan",))
# seq: (kind, message as written at 0007, the message the release before reads)
MESSAGES = {
    0: ("user/message", Message(Role.USER, (Text("go"),)), Message(Role.USER, (Text("go"),))),
    1: (
        "assistant/message",
        Message(
            Role.ASSISTANT,
            (
                Reasoning("t", "sig"),
                OPAQUE,
                Text("ok", "commentary"),
                ITEM,
                ToolCall("c", "f", "{}"),
            ),
        ),
        Message(Role.ASSISTANT, (Reasoning("t", "sig"), Text("ok"), ToolCall("c", "f", "{}"))),
    ),
    2: ("assistant/message", Message(Role.ASSISTANT, (OPAQUE, ITEM)), None),  # derives to nothing
    3: (
        "assistant/message",
        Message(Role.ASSISTANT, (Text("plain"),)),
        Message(Role.ASSISTANT, (Text("plain"),)),
    ),
}


def _insert(url: str) -> None:
    with connect(url) as connection, connection.begin():
        payloads = {seq: codec.encode(message) for seq, (_, message, _) in MESSAGES.items()}
        connection.execute(
            text("INSERT INTO sessions (tenant_id, session_id, log_bytes) VALUES ('t', 's', :n)"),
            {"n": sum(map(len, payloads.values()))},
        )
        for seq, (kind, message, _) in MESSAGES.items():
            connection.execute(
                text(
                    "INSERT INTO events (tenant_id, session_id, seq, kind, turn, step, surface_op,"
                    " source_seqs, payload) VALUES ('t', 's', :seq, :kind, 0, 0, 'append', '{}',"
                    " :payload)"
                ),
                {"seq": seq, "kind": kind, "payload": payloads[seq]},
            )
            connection.execute(
                text(
                    "INSERT INTO surface_nodes (tenant_id, session_id, seq, position, is_system,"
                    " message_pb, tokens, turn, step) VALUES ('t', 's', :seq, :seq, false, :pb,"
                    " 3, 0, 0)"
                ),
                {"seq": seq, "pb": codec.frame(message)},
            )


def test_0007_downgrade_removes_what_the_release_before_cannot_read(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0007")
    _insert(url)
    written = rows(url, "SELECT seq, payload FROM events ORDER BY seq")

    command.downgrade(config, "0006")
    payloads = dict(rows(url, "SELECT seq, payload FROM events"))
    frames = dict(rows(url, "SELECT seq, message_pb FROM surface_nodes"))
    for seq, (_, _, before) in MESSAGES.items():
        expected = before if before is not None else Message(Role.ASSISTANT, ())
        assert bytes(payloads[seq]) == codec.encode(expected)
        assert (bytes(frames[seq]) if frames[seq] is not None else None) == (
            codec.frame(before) if before is not None else None
        )
    assert rows(url, "SELECT log_bytes FROM sessions") == [
        (sum(len(bytes(payload)) for payload in payloads.values()),)
    ]
    # The untouched rows are byte-identical to what was written.
    assert [(seq, payloads[seq]) for seq in (0, 3)] == [written[0], written[3]]

    command.upgrade(config, "head")  # nothing to convert on the way up
    assert dict(rows(url, "SELECT seq, payload FROM events")) == payloads
