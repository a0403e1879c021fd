"""The tokenizer a session's nodes are priced with, and a transition's events written priced."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

from admission_service.app.ports import SessionRepository
from admission_service.domain.accounting import (
    TokenCounter,
    node_prices,
    tools_json,
    tools_price_known,
)
from admission_service.domain.aggregate import SessionAggregate
from admission_service.domain.events import Event
from admission_service.domain.messages import Tool
from admission_service.domain.session import Session, Written
from admission_service.tokenizers import counter_for, counter_off_the_loop, load_off_the_loop


def session_counter(session: Session) -> TokenCounter:
    """The tokenizer of the session's route in force (that of its last admission), which
    priced every surviving node (``use_cases/admit.py``: ``_reprice``): Record, Compact and
    Inspect price with it."""
    context = session.series.last_context
    return counter_for(context.context.provider if context else "")


async def counted_ahead(
    provider: str, texts: Iterable[str], tools: Sequence[Tool] = ()
) -> TokenCounter:
    """``provider``'s counter, with what the call will price counted ahead where counting cannot
    hold the event loop (``tokenizers.counter_off_the_loop``): the large ones among ``texts``,
    and the JSON of ``tools`` when the set is large and its price not remembered. Counting a
    1 MiB tool set takes DeepSeek's tokenizer half a second, which held every call on the
    worker each step until its price was kept by digest (docs/BENCHMARKS.md, eleventh round)."""
    await load_off_the_loop(provider)
    unpriced = () if tools_price_known(tools, counter_for(provider).name) else (tools_json(tools),)
    return await counter_off_the_loop(provider, chain(texts, unpriced))


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
