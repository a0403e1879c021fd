"""What the migrated schema guarantees to the repositories built on it (SPEC §4, §8)."""

from __future__ import annotations

import json
import secrets

import pytest
from admission_service.storage.tables import (
    AdmissionInputRow,
    AdmissionRow,
    Base,
    EventRow,
    IdempotencyKeyRow,
    RequestRow,
    SessionRow,
    SurfaceNodeRow,
)
from sqlalchemy import func, select, text
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

TENANT = "tenant-tables"
# NUL, astral-plane characters (4 UTF-8 bytes, surrogate pairs in UTF-16), the last code point.
AWKWARD = "a\x00b \U0001f600 \U0001d11e \U0010ffff \x00"


def new_session_id() -> str:
    return f"s-{secrets.token_hex(4)}"


def one_of_everything(session_id: str) -> list[Base]:
    key = {"tenant_id": TENANT, "session_id": session_id}
    return [
        SessionRow(**key),
        EventRow(**key, seq=0, kind="system/message", turn=0, step=0, payload=b"{}"),
        SurfaceNodeRow(**key, seq=0, position=0, is_system=True, turn=0, step=0),
        AdmissionInputRow(**key, digest=b"\1" * 32, body=b"[]"),
        AdmissionRow(
            **key,
            admission_id="a0",
            turn=0,
            step=0,
            prompt_digest=b"\1" * 32,
            tools_digest=b"\1" * 32,
        ),
        RequestRow(**key, request_index=0, admission_id="a0", attempt=1, forecast=b"{}"),
        IdempotencyKeyRow(
            **key, request_id="r0", method="Admit", request_digest=b"\0" * 32, response=b"\0"
        ),
    ]


async def add_in_order(session: AsyncSession, rows: list[Base]) -> None:
    # One flush per row: the ORM does not order inserts by foreign keys without relationships.
    for row in rows:
        session.add(row)
        await session.flush()


async def count(session: AsyncSession, table: type[Base], session_id: str) -> int:
    columns = table.__table__.c
    query = select(func.count()).where(
        columns.tenant_id == TENANT, columns.session_id == session_id
    )
    return (await session.execute(query)).scalar_one()


async def test_nul_and_astral_text_round_trip_byte_for_byte(db_session: AsyncSession) -> None:
    session_id = new_session_id()
    payload = json.dumps({"text": AWKWARD}, ensure_ascii=False).encode()
    raw_text = AWKWARD.encode()  # system_text keeps raw UTF-8, NUL bytes included
    assert b"\x00" in raw_text
    await add_in_order(
        db_session,
        [
            SessionRow(tenant_id=TENANT, session_id=session_id, last_header=raw_text),
            EventRow(
                tenant_id=TENANT,
                session_id=session_id,
                seq=0,
                kind="system/message",
                turn=1,
                step=1,
                payload=payload,
            ),
            SurfaceNodeRow(
                tenant_id=TENANT,
                session_id=session_id,
                seq=0,
                position=0,
                is_system=True,
                system_text=raw_text,
                turn=1,
                step=1,
            ),
        ],
    )
    await db_session.commit()
    db_session.expunge_all()

    stored = await db_session.execute(
        text(
            "SELECT e.payload, n.system_text, s.last_header FROM events e"
            " JOIN surface_nodes n USING (tenant_id, session_id, seq)"
            " JOIN sessions s USING (tenant_id, session_id)"
            " WHERE e.tenant_id = :t AND e.session_id = :s"
        ),
        {"t": TENANT, "s": session_id},
    )
    event_payload, system_text, last_header = stored.one()
    assert event_payload == payload
    assert json.loads(event_payload)["text"] == AWKWARD
    assert system_text == raw_text
    assert system_text.decode() == AWKWARD
    assert last_header == raw_text


async def test_text_columns_would_reject_nul(db_session: AsyncSession) -> None:
    # Why payloads are bytea: PostgreSQL text (and jsonb) cannot hold U+0000.
    with pytest.raises(DataError):
        await db_session.execute(text("SELECT CAST(:v AS text)"), {"v": AWKWARD})


async def test_deleting_a_session_deletes_its_rows_and_nothing_else(
    db_session: AsyncSession,
) -> None:
    doomed, kept = new_session_id(), new_session_id()
    await add_in_order(db_session, one_of_everything(doomed) + one_of_everything(kept))

    await db_session.delete(await db_session.get_one(SessionRow, (TENANT, doomed)))
    await db_session.flush()

    for table in (
        SessionRow,
        EventRow,
        SurfaceNodeRow,
        AdmissionInputRow,
        AdmissionRow,
        RequestRow,
    ):
        assert await count(db_session, table, doomed) == 0, table.__tablename__
        assert await count(db_session, table, kept) == 1, table.__tablename__
    # Not cascaded (its DeleteSession response must survive): deleted explicitly, or expired.
    assert await count(db_session, IdempotencyKeyRow, doomed) == 1


@pytest.mark.parametrize(
    ("surface_op", "start", "end"),
    [
        ("insert", None, None),  # not a surface operation
        ("replace", None, None),  # a replace must cite its range
        ("replace", 0, None),
        ("append", 0, 0),  # an append has no range
        (None, 0, 0),
        ("replace", 0, 5),  # replaces only what was committed before it
    ],
)
async def test_events_refuse_inconsistent_surface_operations(
    db_session: AsyncSession, surface_op: str | None, start: int | None, end: int | None
) -> None:
    session_id = new_session_id()
    await add_in_order(db_session, [SessionRow(tenant_id=TENANT, session_id=session_id)])
    event = EventRow(
        tenant_id=TENANT,
        session_id=session_id,
        seq=3,
        kind="user/message",
        turn=0,
        step=0,
        surface_op=surface_op,
        replace_start_seq=start,
        replace_end_seq=end,
        payload=b"{}",
    )
    db_session.add(event)
    with pytest.raises(IntegrityError, match="ck_events_"):
        await db_session.flush()


async def test_a_replace_may_cite_its_range_in_surface_order(db_session: AsyncSession) -> None:
    session_id = new_session_id()
    await add_in_order(
        db_session,
        [
            SessionRow(tenant_id=TENANT, session_id=session_id),
            EventRow(
                tenant_id=TENANT,
                session_id=session_id,
                seq=9,
                kind="compaction/summary",
                turn=2,
                step=0,
                surface_op="replace",
                replace_start_seq=7,  # surface order is not seq order
                replace_end_seq=4,
                source_seqs=[7, 2, 4],
                payload=b"{}",
            ),
        ],
    )
    stored = await db_session.get_one(EventRow, (TENANT, session_id, 9))
    assert stored.source_seqs == [7, 2, 4]


async def test_surface_positions_are_unique_within_a_session(db_session: AsyncSession) -> None:
    session_id = new_session_id()
    key = {"tenant_id": TENANT, "session_id": session_id}
    rows: list[Base] = [SessionRow(**key)]
    for seq in (0, 1):
        rows.append(EventRow(**key, seq=seq, kind="user/message", turn=0, step=0, payload=b""))
    rows.append(SurfaceNodeRow(**key, seq=0, position=0, is_system=False, turn=0, step=0))
    await add_in_order(db_session, rows)

    db_session.add(SurfaceNodeRow(**key, seq=1, position=0, is_system=False, turn=0, step=0))
    with pytest.raises(IntegrityError, match="uq_surface_nodes_tenant_id_session_id_position"):
        await db_session.flush()
