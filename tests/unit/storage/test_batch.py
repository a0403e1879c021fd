"""The statement batch: deferred writes become one statement, in order, every value bound."""

from __future__ import annotations

from typing import Any

from admission_service.storage.batch import StatementBatch, param


def test_an_empty_batch_sends_nothing() -> None:
    batch = StatementBatch()
    assert not batch
    assert batch.take() is None


def test_one_write_is_sent_as_it_is() -> None:
    batch = StatementBatch()
    batch.insert("t", [{"a": 1, "b": "x"}, {"a": 2, "b": None}])
    assert batch
    assert batch.take() == ("INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4)", [1, "x", 2, None])
    assert not batch


def test_writes_ahead_of_the_last_become_its_ctes_in_order() -> None:
    batch = StatementBatch()
    batch.insert("events", [{"seq": 7}])

    def update(params: list[Any]) -> str:
        return f"UPDATE sessions SET n = {param(params, 8)} WHERE id = {param(params, 'x')}"

    batch.insert("nodes", [{"seq": 7, "data": b"\x00"}])
    batch.defer(update)
    assert batch.take() == (
        "WITH w0 AS (INSERT INTO events (seq) VALUES ($1)),"
        " w1 AS (INSERT INTO nodes (seq, data) VALUES ($2, $3))"
        " UPDATE sessions SET n = $4 WHERE id = $5",
        [7, 7, b"\x00", 8, "x"],
    )
    assert batch.take() is None
