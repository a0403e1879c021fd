"""The Alembic migrations are the schema: they apply, reverse, match ``tables.py``, and keep
the rules the scale-out story depends on (SPEC §10)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from admission_service.domain.events import Event, Replace
from admission_service.domain.messages import Message, Tool
from admission_service.domain.stored import AdmissionRecord
from admission_service.storage import codec
from admission_service.storage.distribution import REFERENCE_TABLES
from admission_service.storage.engine import (
    LATEST_MIGRATION,
    MIGRATIONS_DIR,
    alembic_config,
    create_engine,
    libpq_url,
    migrate_to_latest,
    run_migrations,
)
from admission_service.storage.repository import SessionStore
from admission_service.storage.tables import Base
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy import Connection, pool, text
from sqlalchemy import create_engine as create_sync_engine

from tests import stored_0004
from tests.imports import imported_packages

from .test_session_store import session_events

REPO_ROOT = Path(__file__).resolve().parents[2]
# The tables of sessions; the schema's rules below are theirs. The global tables (Citus
# reference tables) hold no session's rows.
SESSION_TABLES = {
    "sessions",
    "events",
    "surface_nodes",
    "tool_calls",
    "admissions",
    "requests",
    "idempotency_keys",
    "frame_chunks",
    "admission_inputs",
}
TABLES = SESSION_TABLES | REFERENCE_TABLES
GLOBAL_TABLES = ", ".join(f"'{name}'" for name in sorted(REFERENCE_TABLES))
# Identifiers and closed vocabularies; everything else that is text-like must be bytea.
TEXT_COLUMNS = {
    "tenant_id",
    "session_id",
    "kind",
    "surface_op",
    "admission_id",
    "request_id",
    "method",
    "call_id",  # a caller's identifier; validation refuses NUL in identifiers
}


@contextmanager
def connect(url: str) -> Iterator[Connection]:
    engine = create_sync_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> list[Any]:
    with connect(url) as connection:
        return [tuple(row) for row in connection.execute(text(sql))]


def current_revision(url: str) -> str | None:
    with connect(url) as connection:
        return MigrationContext.configure(connection).get_current_revision()


def schema_snapshot(url: str) -> list[Any]:
    """Columns, constraints and indexes of the public schema, comparable across migrations."""
    return rows(
        url,
        """
        SELECT 'column', table_name, column_name || ' ' || data_type || ' '
               || is_nullable || ' ' || coalesce(column_default, '')
        FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL
        SELECT 'constraint', conrelid::regclass::text, conname || ' '
               || pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace
        UNION ALL
        SELECT 'index', tablename, indexdef FROM pg_indexes WHERE schemaname = 'public'
        ORDER BY 1, 2, 3
        """,
    )


def test_single_head() -> None:
    from_ini = ScriptDirectory.from_config(Config(str(REPO_ROOT / "alembic.ini")))
    in_code = ScriptDirectory.from_config(alembic_config("postgresql://unused/unused"))
    assert Path(from_ini.dir).resolve() == Path(in_code.dir).resolve() == MIGRATIONS_DIR
    assert len(in_code.get_heads()) == 1
    assert from_ini.get_heads() == in_code.get_heads()


def test_the_latest_migration_named_in_code_is_alembics_head() -> None:
    """``LATEST_MIGRATION`` (what a serving process compares the database with before it
    would import Alembic) is the head: a new migration must update it."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/unused"))
    assert script.get_current_head() == LATEST_MIGRATION


# A serving process, on a database at the latest migration and on one it migrates, never
# imports Alembic (measured: ~13 MiB of a worker's memory): checked in a fresh interpreter.
_SERVE_START = """
import sys
from admission_service.api import server
from admission_service.storage.engine import migrate_to_latest
assert "alembic" not in sys.modules, "imported with the server"
migrate_to_latest(sys.argv[1])
assert "alembic" not in sys.modules, "imported by migrate_to_latest"
"""


def test_a_serving_process_migrates_without_holding_alembic(empty_database_url: str) -> None:
    for _ in range(2):  # migrated in a spawned process, then already at the latest
        subprocess.run([sys.executable, "-c", _SERVE_START, empty_database_url], check=True)
        assert current_revision(empty_database_url) == LATEST_MIGRATION


def test_a_failed_migration_at_start_is_raised_in_the_serving_process(
    empty_database_url: str,
) -> None:
    """The spawned upgrade's failure reaches the caller (serve exits with it)."""
    with psycopg.connect(libpq_url(empty_database_url), autocommit=True) as connection:
        connection.execute("CREATE TABLE sessions (blocking int)")  # 0001 creates it
    with pytest.raises(Exception, match="sessions"):
        migrate_to_latest(empty_database_url)
    assert current_revision(empty_database_url) is None


def test_migration_files_are_named_by_ordinal_and_slug() -> None:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/unused"))
    for revision in script.walk_revisions():
        assert revision.path is not None
        name = Path(revision.path).name
        assert revision.revision.isdigit(), revision.revision
        assert name.startswith(f"{revision.revision}_"), name


def test_upgrade_head_on_an_empty_database(empty_database_url: str) -> None:
    run_migrations(empty_database_url)

    head = ScriptDirectory.from_config(alembic_config(empty_database_url)).get_current_head()
    assert current_revision(empty_database_url) == head
    tables = rows(
        empty_database_url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    )
    assert {name for (name,) in tables} == TABLES | {"alembic_version"}


def test_models_match_migrations(database_url: str) -> None:
    # `alembic check`: raises AutogenerateDiffsDetected when tables.py and the migrations differ.
    command.check(alembic_config(database_url))


def test_metadata_describes_exactly_the_migrated_tables() -> None:
    assert set(Base.metadata.tables) == TABLES


def test_downgrade_to_base_and_upgrade_again(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    migrated = schema_snapshot(empty_database_url)

    command.downgrade(config, "base")
    assert current_revision(empty_database_url) is None
    assert (
        rows(
            empty_database_url,
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_name <> 'alembic_version'",
        )
        == []
    )

    command.upgrade(config, "head")
    assert schema_snapshot(empty_database_url) == migrated


def test_every_primary_key_leads_with_tenant_and_session(database_url: str) -> None:
    keys = dict(
        rows(
            database_url,
            """
            SELECT c.conrelid::regclass::text,
                   array_agg(a.attname::text ORDER BY k.ord)
            FROM pg_constraint c
            CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
            WHERE c.contype = 'p' AND c.connamespace = 'public'::regnamespace
              AND c.conrelid::regclass::text <> 'alembic_version'
            GROUP BY c.conrelid
            """,
        )
    )
    assert set(keys) == TABLES, "every table has a primary key"
    for table, columns in keys.items():
        if table in SESSION_TABLES:
            assert columns[:2] == ["tenant_id", "session_id"], (table, columns)
        else:
            assert "session_id" not in columns, (table, columns)
    assert keys["sessions"] == ["tenant_id", "session_id"]


def test_every_unique_constraint_and_foreign_key_stays_inside_a_session(
    database_url: str,
) -> None:
    constraints = rows(
        database_url,
        """
        SELECT c.conname, c.contype::text,
               array_agg(a.attname::text ORDER BY k.ord),
               array_agg(coalesce(fa.attname::text, '') ORDER BY k.ord)
        FROM pg_constraint c
        CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
        LEFT JOIN pg_attribute fa
               ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[k.ord]
        WHERE c.contype IN ('f', 'u') AND c.connamespace = 'public'::regnamespace
        GROUP BY c.oid, c.conname, c.contype
        """,
    )
    assert any(kind == "f" for _, kind, _, _ in constraints)
    for name, kind, columns, referenced in constraints:
        assert columns[:2] == ["tenant_id", "session_id"], (name, columns)
        if kind == "f":
            # tenant_id -> tenant_id and session_id -> session_id: the target is the same session.
            assert referenced[:2] == ["tenant_id", "session_id"], (name, referenced)


def test_every_unique_index_leads_with_tenant_and_session(database_url: str) -> None:
    # Also the unique indexes no constraint declares: on a database distributed by session
    # (docs/SCALING.md) a unique index must hold the distribution column, and one that leads
    # with tenant and session is checked inside one session.
    indexes = rows(
        database_url,
        f"""
        SELECT i.indexrelid::regclass::text,
               array_agg(a.attname::text ORDER BY k.ord)
        FROM pg_index i
        JOIN pg_class t ON t.oid = i.indrelid
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE i.indisunique AND t.relnamespace = 'public'::regnamespace
          AND t.relname <> 'alembic_version' AND t.relname NOT IN ({GLOBAL_TABLES})
        GROUP BY i.indexrelid
        """,
    )
    assert indexes
    for name, columns in indexes:
        assert columns[:2] == ["tenant_id", "session_id"], (name, columns)


def test_no_key_comes_from_a_shared_sequence(database_url: str) -> None:
    # Sequences and identity columns would be one counter for every session (a cross-session
    # write on every insert); seqs and positions come from the session's own row instead.
    generated = rows(
        database_url,
        """
        SELECT table_name, column_name FROM information_schema.columns
        WHERE table_schema = 'public' AND table_name <> 'alembic_version'
          AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')
        """,
    )
    assert generated == []
    assert rows(database_url, "SELECT sequence_name FROM information_schema.sequences") == []


def test_no_trigger_or_rule_reaches_across_sessions(database_url: str) -> None:
    triggers = rows(
        database_url,
        "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace",
    )
    rules = rows(database_url, "SELECT rulename FROM pg_rules WHERE schemaname = 'public'")
    assert (triggers, rules) == ([], [])


def test_every_child_table_cascades_from_sessions(database_url: str) -> None:
    cascading = {
        table
        for (table,) in rows(
            database_url,
            """
            SELECT conrelid::regclass::text FROM pg_constraint
            WHERE contype = 'f' AND confrelid = 'sessions'::regclass AND confdeltype = 'c'
            """,
        )
    }
    # idempotency_keys outlives its session on purpose (see storage/tables.py).
    assert cascading == SESSION_TABLES - {"sessions", "idempotency_keys"}


def test_user_text_is_never_stored_as_text_or_json(database_url: str) -> None:
    columns = rows(
        database_url,
        """
        SELECT table_name, column_name, data_type FROM information_schema.columns
        WHERE table_schema = 'public' AND table_name <> 'alembic_version'
          AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb')
        """,
    )
    assert {column for _, column, _ in columns} <= TEXT_COLUMNS, columns
    assert not [c for c in columns if c[2] in ("json", "jsonb")]


def test_migrations_import_no_application_code() -> None:
    """A migration is a fixed point in history: application code keeps changing under it."""
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        imported = imported_packages(path)
        # The API's generated protobuf code may be used: buf breaking keeps v1's encoding fixed.
        allowed = {"alembic", "sqlalchemy", "google", "promptadmission"}
        assert imported <= {*allowed, *sys.stdlib_module_names}, path.name


# Every block kind, with empty and non-ASCII strings and a tool result's nested content.
STORED_MESSAGES: list[tuple[dict[str, Any], pb.Message]] = [
    (
        {"role": "user", "content": [{"type": "text", "text": "héllo 🙂"}]},
        pb.Message(
            role=pb.MESSAGE_ROLE_USER, content=[pb.ContentBlock(text=pb.TextBlock(text="héllo 🙂"))]
        ),
    ),
    (
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "think"},
                {"type": "text", "text": ""},
                {"type": "tool_call", "call_id": "c1", "name": "read", "arguments_json": "{}"},
            ],
        },
        pb.Message(
            role=pb.MESSAGE_ROLE_ASSISTANT,
            content=[
                pb.ContentBlock(reasoning=pb.ReasoningBlock(text="think")),
                pb.ContentBlock(text=pb.TextBlock(text="")),
                pb.ContentBlock(
                    tool_call=pb.ToolCallBlock(call_id="c1", name="read", arguments_json="{}")
                ),
            ],
        ),
    ),
    (
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool_result",
                    "call_id": "c1",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "x" * 300},
                        {"type": "image", "uri": "data:,", "media_type": "image/png"},
                    ],
                }
            ],
        },
        pb.Message(
            role=pb.MESSAGE_ROLE_TOOL,
            content=[
                pb.ContentBlock(
                    tool_result=pb.ToolResultBlock(
                        call_id="c1",
                        is_error=True,
                        content=[
                            pb.ContentBlock(text=pb.TextBlock(text="x" * 300)),
                            pb.ContentBlock(
                                image=pb.ImageBlock(uri="data:,", media_type="image/png")
                            ),
                        ],
                    )
                )
            ],
        ),
    ),
    (
        {"role": "system", "content": []},
        pb.Message(role=pb.MESSAGE_ROLE_SYSTEM),
    ),
]


def test_0002_backfills_frames_the_generated_code_reads(empty_database_url: str) -> None:
    """Rows stored before 0002 get the frame the API's generated protobuf code would encode."""
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0001")
    with connect(empty_database_url) as connection, connection.begin():
        connection.execute(text("INSERT INTO sessions (tenant_id, session_id) VALUES ('t', 's')"))
        for seq, (stored, _) in enumerate(STORED_MESSAGES):
            connection.execute(
                text(
                    "INSERT INTO events (tenant_id, session_id, seq, kind, turn, step,"
                    " surface_op, payload) VALUES ('t', 's', :seq, 'user_message', 0, 0,"
                    " 'append', '\\x7b7d')"
                ),
                {"seq": seq},
            )
            connection.execute(
                text(
                    "INSERT INTO surface_nodes (tenant_id, session_id, seq, position, is_system,"
                    " message, tokens, turn, step) VALUES ('t', 's', :seq, :seq, false, :message,"
                    " 3, 0, 0)"
                ),
                {"seq": seq, "message": json.dumps(stored).encode()},
            )
    command.upgrade(config, "0002")

    frames = rows(empty_database_url, "SELECT message_pb FROM surface_nodes ORDER BY seq")
    expected = [pb.DerivedRequest(messages=[message]) for _, message in STORED_MESSAGES]
    assert [bytes(frame) for (frame,) in frames] == [m.SerializeToString() for m in expected]
    assert rows(empty_database_url, "SELECT surface_tokens FROM sessions") == [
        (3 * len(STORED_MESSAGES),)
    ]


# ---- 0005: one stored encoding of a message ----------------------------------------------


def _insert_as_of_0004(url: str, events: list[Event]) -> dict[str, list[Any]]:
    """The session's rows as the application wrote them at 0004 (JSON payloads and node
    messages beside the protobuf frames); the rows it inserted, by table."""
    surviving = {2: 0, 8: 1, 6: 4, 7: 5}  # seq: position, after event 8 replaced 3..5
    payloads = [stored_0004.event_payload(event) for event in events]
    with connect(url) as connection, connection.begin():
        connection.execute(
            text("INSERT INTO sessions (tenant_id, session_id, log_bytes) VALUES ('t', 's', :n)"),
            {"n": sum(len(payload) for payload in payloads)},
        )
        for event, payload in zip(events, payloads, strict=True):
            replace = event.op if isinstance(event.op, Replace) else None
            connection.execute(
                text(
                    "INSERT INTO events (tenant_id, session_id, seq, kind, turn, step, surface_op,"
                    " replace_start_seq, replace_end_seq, source_seqs, admission_id, payload)"
                    " VALUES ('t', 's', :seq, :kind, :turn, :step, :op, :start, :end, :sources,"
                    " :admission, :payload)"
                ),
                {
                    "seq": event.seq,
                    "kind": event.kind.value,
                    "turn": event.turn,
                    "step": event.step,
                    "op": None if event.op is None else "replace" if replace else "append",
                    "start": replace.start_seq if replace else None,
                    "end": replace.end_seq if replace else None,
                    "sources": list(event.source_seqs),
                    "admission": event.admission_id or None,
                    "payload": payload,
                },
            )
        for seq, position in surviving.items():
            event = events[seq]
            message = event.derived_message()
            connection.execute(
                text(
                    "INSERT INTO surface_nodes (tenant_id, session_id, seq, position, is_system,"
                    " system_text, message, message_pb, tokens, turn, step) VALUES ('t', 's',"
                    " :seq, :position, :system, :text, :message, :pb, 3, 0, 0)"
                ),
                {
                    "seq": seq,
                    "position": position,
                    "system": event.is_system,
                    "text": event.system_text.encode() if event.is_system else None,
                    "message": stored_0004.encode_message(message) if message else None,
                    "pb": codec.frame(message) if message else None,
                },
            )
    return {
        "events": rows(url, "SELECT seq, payload FROM events ORDER BY seq"),
        "nodes": rows(url, "SELECT seq, message, message_pb FROM surface_nodes ORDER BY seq"),
        "sessions": rows(url, "SELECT log_bytes FROM sessions"),
    }


async def _read_back(url: str) -> tuple[list[Event], list[Message | None], list[bool]]:
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as connection:
            store = SessionStore(connection, "t", "s")
            logged = [row.event() for row in await store.events_after(-1, 100)]
            surface = [node.decoded() for node in await store.surface()]
            updates = [row.update for row in await store.system_node_details()]
            return logged, surface, updates
    finally:
        await engine.dispose()


def test_0006_stores_one_random_page_token_key_and_its_downgrade_drops_it(
    empty_database_url: str,
) -> None:
    """Every database gets a key of its own (no key is derived from the URL any more)."""
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0006")
    (secret,) = (bytes(key) for (key,) in rows(url, "SELECT secret FROM page_token_keys"))
    assert len(secret) == 32 and secret != bytes(32)
    command.downgrade(config, "0005")
    assert rows(url, "SELECT to_regclass('page_token_keys') IS NULL") == [(True,)]
    command.upgrade(config, "0006")
    (again,) = (bytes(key) for (key,) in rows(url, "SELECT secret FROM page_token_keys"))
    assert again != secret


def test_0005_stores_a_message_once_and_reads_back_identically(empty_database_url: str) -> None:
    """Rows written at 0004 read back as the same events and messages after 0005, whose
    payloads are the messages' protobuf encoding; the downgrade restores the 0004 bytes."""
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0004")
    events = session_events()
    before = _insert_as_of_0004(url, events)

    command.upgrade(config, "0005")
    logged, surface, updates = asyncio.run(_read_back(url))
    assert logged == events
    assert surface == [events[seq].derived_message() for seq in (2, 8, 6, 7)]
    assert updates == [False, True]
    payloads = dict(rows(url, "SELECT seq, payload FROM events"))
    for event in events:
        if event.message is not None:
            assert bytes(payloads[event.seq]) == codec.encode(event.message)
    frames = rows(url, "SELECT message_pb FROM surface_nodes ORDER BY seq")
    assert frames == [(pb,) for _, _, pb in before["nodes"]]  # the frames were already protobuf
    assert rows(url, "SELECT log_bytes FROM sessions") == [
        (sum(len(bytes(payload)) for payload in payloads.values()),)
    ]

    command.downgrade(config, "0004")
    assert rows(url, "SELECT seq, payload FROM events ORDER BY seq") == before["events"]
    assert (
        rows(url, "SELECT seq, message, message_pb FROM surface_nodes ORDER BY seq")
        == (before["nodes"])
    )
    assert rows(url, "SELECT log_bytes FROM sessions") == before["sessions"]


def test_0010_compresses_frames_with_lz4_where_the_server_has_it_and_its_downgrade_reverts(
    empty_database_url: str,
) -> None:
    """A frame written after 0010 is lz4 on a server built with lz4 (PostgreSQL at DATABASE_URL
    on Debian), pglz on one without (the embedded PostgreSQL); 0009 writes pglz everywhere."""
    url = empty_database_url
    config = alembic_config(url)
    (has_lz4,) = rows(
        url,
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
    )[0]

    def compression_of_a_new_frame() -> tuple[list[Any], str]:
        with connect(url) as connection, connection.begin():
            connection.execute(text("DELETE FROM sessions WHERE tenant_id = 't-0010'"))
            connection.execute(
                text("INSERT INTO sessions (tenant_id, session_id) VALUES ('t-0010', 's')")
            )
            connection.execute(
                text(
                    "INSERT INTO frame_chunks (tenant_id, session_id, first_position,"
                    " end_position, frames, messages, tokens)"
                    " VALUES ('t-0010', 's', 0, 1, :frames, 1, 1)"
                ),
                {"frames": b"a compressible frame " * 10_000},
            )
        settings = rows(
            url,
            "SELECT attname, attcompression FROM pg_attribute WHERE attrelid IN"
            " ('frame_chunks'::regclass, 'surface_nodes'::regclass)"
            " AND attname IN ('frames', 'message_pb') ORDER BY attname",
        )
        (method,) = rows(url, "SELECT pg_column_compression(frames) FROM frame_chunks")[0]
        return settings, method

    command.upgrade(config, "0009")
    assert compression_of_a_new_frame() == ([("frames", ""), ("message_pb", "")], "pglz")
    command.upgrade(config, "0010")
    expected = "l" if has_lz4 else ""
    assert compression_of_a_new_frame() == (
        [("frames", expected), ("message_pb", expected)],
        "lz4" if has_lz4 else "pglz",
    )
    command.downgrade(config, "0009")
    assert compression_of_a_new_frame() == ([("frames", ""), ("message_pb", "")], "pglz")


def test_0011_stores_each_admission_input_once_and_its_downgrade_puts_them_back(
    empty_database_url: str,
) -> None:
    """Admissions written at 0010 with their prompt and tools in each row read back the same
    after 0011, which keeps each distinct input once per session; the downgrade restores the
    0010 rows byte for byte."""
    url = empty_database_url
    config = alembic_config(url)
    command.upgrade(config, "0010")
    tools = codec.encode_tools((Tool("grep", "search files", '{"type": "object"}'),))
    prompt, other = "be brief\0 ü".encode(), b"be thorough"
    admitted = [("s", "a1", prompt), ("s", "a2", prompt), ("s", "a3", other), ("u", "b1", prompt)]
    with connect(url) as connection, connection.begin():
        for session_id in ("s", "u"):
            connection.execute(
                text("INSERT INTO sessions (tenant_id, session_id) VALUES ('t', :s)"),
                {"s": session_id},
            )
        for step, (session_id, admission_id, rendered) in enumerate(admitted):
            connection.execute(
                text(
                    "INSERT INTO admissions (tenant_id, session_id, admission_id, turn, step,"
                    " rendered_prompt, tools, users_seqs, attempts)"
                    " VALUES ('t', :s, :a, 1, :step, :p, :tools, '{3}', 2)"
                ),
                {"s": session_id, "a": admission_id, "step": step, "p": rendered, "tools": tools},
            )
    # By name: the downgrade puts the columns back at the end of the row.
    as_of_0010 = (
        "SELECT tenant_id, session_id, admission_id, turn, step, rendered_prompt, tools,"
        " users_seqs, attempts, create_time FROM admissions ORDER BY admission_id"
    )
    before = rows(url, as_of_0010)

    command.upgrade(config, "0011")
    stored = rows(url, "SELECT session_id, body FROM admission_inputs ORDER BY 1, 2")
    assert stored == sorted(
        [("s", prompt), ("s", other), ("s", tools), ("u", prompt), ("u", tools)]
    )
    digests = rows(
        url, "SELECT admission_id, prompt_digest, tools_digest FROM admissions ORDER BY 1"
    )
    assert digests == [
        (admission_id, hashlib.sha256(rendered).digest(), hashlib.sha256(tools).digest())
        for _, admission_id, rendered in admitted
    ]
    assert asyncio.run(_admission(url, "s", "a3")) == AdmissionRecord(
        "a3", 1, 2, "be thorough", codec.decode_tools(tools), 2
    )
    assert asyncio.run(_admission(url, "u", "b1")) == AdmissionRecord(
        "b1", 1, 3, "be brief\0 ü", codec.decode_tools(tools), 2
    )

    command.downgrade(config, "0010")
    assert rows(url, as_of_0010) == before


async def _admission(url: str, session_id: str, admission_id: str) -> AdmissionRecord | None:
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as connection:
            return await SessionStore(connection, "t", session_id).admission(admission_id)
    finally:
        await engine.dispose()
