"""The tokenizer a session's nodes are priced with, and a transition's events written priced."""

from __future__ import annotations

from collections.abc import Sequence

from admission_service.app.ports import SessionRepository
from admission_service.domain.accounting import TokenCounter, node_prices
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.events import Event
from admission_service.domain.session import Session, Written
from admission_service.tokenizers import counter_for


def session_counter(session: Session) -> TokenCounter:
    """The tokenizer of the session's route in force (that of its last admission), which
    priced every surviving node (``use_cases/admit.py``: ``_reprice``): Record, Compact and
    Inspect price with it."""
    context = session.series.last_context
    return counter_for(context.context.provider if context else "")


async def write_priced(
    sessions: SessionRepository, session: Session, events: Sequence[Event], counter: TokenCounter
) -> Written:
    """Write a transition's events at the surface's end, each new node priced by the domain with
    ``counter``."""
    return await sessions.write_events(events, session.next_position, node_prices(events, counter))


async def followed(
    sessions: SessionRepository,
    aggregate: SessionAggregate,
    events: Sequence[Event],
    written: Written,
) -> SessionAggregate:
    """The aggregate after ``events`` were written (its row still the one before: the
    transition's own ``Session`` method moves it). A write it cannot follow (a replacement)
    reads its system nodes and open calls again, after the deferred writes: so not before a
    derived request is read, whose tail must still be unwritten (``derive_request``)."""
    after = aggregate.wrote(events, written)
    if after is None:
        after = aggregate.reread(*await sessions.system_nodes_and_open_calls())
    return after
