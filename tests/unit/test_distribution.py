"""The Citus placement of every table (``storage/distribution.py``), decided from the metadata.

These run in ``make test`` without a cluster: a table added to ``tables.py`` that is neither
session-scoped nor a declared reference table fails here, before anyone runs it on Citus
(``tests/citus`` checks the placements on a real cluster).
"""

from __future__ import annotations

import pytest
from admission_service.storage import distribution
from admission_service.storage.tables import Base
from sqlalchemy import Column, MetaData, Table, Text


def copy_of_schema() -> MetaData:
    metadata = MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(metadata)
    return metadata


def test_every_table_of_the_schema_has_a_placement() -> None:
    placements = distribution.plan()
    assert {p.table for p in placements} == set(Base.metadata.tables)
    # Everything the service stores belongs to one session, but the page-token keys (global:
    # every node reads them).
    kinds = {p.table: p.kind for p in placements}
    assert {t for t, kind in kinds.items() if kind == "reference"} == {"page_token_keys"}
    assert {kinds[t] for t in kinds if t != "page_token_keys"} == {"distributed"}


def test_the_anchor_comes_first_and_referenced_tables_before_their_referrers() -> None:
    order = [p.table for p in distribution.plan()]
    assert order[0] == distribution.ANCHOR_TABLE
    for table in Base.metadata.sorted_tables:
        for key in table.foreign_keys:
            referenced = key.column.table.name
            assert order.index(referenced) < order.index(table.name), (table.name, referenced)


def test_a_table_without_a_session_is_refused_until_declared() -> None:
    metadata = copy_of_schema()
    Table("tenant_settings", metadata, Column("tenant_id", Text, primary_key=True))
    with pytest.raises(distribution.UndecidedTable, match="tenant_settings"):
        distribution.plan(metadata)


def test_a_new_session_scoped_table_is_distributed_without_being_listed() -> None:
    metadata = copy_of_schema()
    Table(
        "session_notes",
        metadata,
        Column("tenant_id", Text, primary_key=True),
        Column("session_id", Text, primary_key=True),
    )
    placements = {p.table: p.kind for p in distribution.plan(metadata)}
    assert placements["session_notes"] == "distributed"
