"""Token accounting and the cache forecast (SPEC §6).

Prices are the reference token meter's (dsh-behaviour §5): fixed overheads per block and per
message around the token count of each text. The text is counted by a ``TokenCounter``: the
public heuristic (4 characters per token; lengths are JavaScript string lengths, i.e. UTF-16
code units), which matches the reference number for number, or a route's real tokenizer, which
the service injects (``admission_service.tokenizers``; this module stays free of I/O). Images
are always priced by the heuristic over their JSON: a tokenizer's count of a URI says nothing
about what the provider charges for the picture.

Opaque reasoning (an Anthropic ``redacted_thinking`` block's data, a Responses reasoning item's
``encrypted_content``) is billed as input when it is sent back, as the reasoning it hides, which
no tokenizer can see: it is priced as the text its base64 data decodes to (3 bytes per 4
characters), at the heuristic's 4 characters a token. A reasoning item's summary and reasoning
texts are counted by the route's counter, as text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from admission_service.domain import messages as msg
from admission_service.domain.events import Event
from admission_service.domain.memo import BoundedMemo

CHARS_PER_TOKEN = 4
BLOCK_OVERHEAD = 4
ROLE_OVERHEAD = 4


def js_length(text: str) -> int:
    """The length JavaScript reports for ``text`` (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def _tokens(text: str) -> int:
    return -(-js_length(text) // CHARS_PER_TOKEN)


class TokenCounter(Protocol):
    """Counts the tokens of a text; ``name`` is what Inspect's breakdown reports. Hashable, so
    a price can be remembered per counter."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...

    def __hash__(self) -> int: ...


# The name of the reference heuristic (TokenBreakdown.tokenizer on the API).
HEURISTIC = "heuristic"


class _Heuristic:
    """The reference meter's estimate: ceil(UTF-16 length / 4)."""

    name = HEURISTIC

    @staticmethod
    def count(text: str) -> int:
        return _tokens(text)


HEURISTIC_COUNTER: TokenCounter = _Heuristic()


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def block_tokens(block: msg.Block, counter: TokenCounter = HEURISTIC_COUNTER) -> int:
    if isinstance(block, msg.Text | msg.Reasoning):
        return counter.count(block.text) + BLOCK_OVERHEAD
    if isinstance(block, msg.ToolCall):
        return counter.count(block.name) + counter.count(block.arguments_json) + BLOCK_OVERHEAD
    if isinstance(block, msg.ToolResult):
        return content_tokens(block.content, counter) + BLOCK_OVERHEAD
    if isinstance(block, msg.RedactedReasoning):
        return opaque_tokens(block.data) + BLOCK_OVERHEAD
    if isinstance(block, msg.ReasoningItem):
        texts = (*block.summary, *block.content)
        return (
            opaque_tokens(block.encrypted_content)
            + sum(counter.count(text) for text in texts)
            + BLOCK_OVERHEAD
        )
    return BLOCK_OVERHEAD + _tokens(_image_json(block))


def counted_texts(blocks: Sequence[msg.Block]) -> Iterator[str]:
    """The texts ``block_tokens`` hands the counter for ``blocks``, in order: what a service
    can count ahead (off its event loop) and hand back through a counter that remembers."""
    for block in blocks:
        if isinstance(block, msg.Text | msg.Reasoning):
            yield block.text
        elif isinstance(block, msg.ToolCall):
            yield block.name
            yield block.arguments_json
        elif isinstance(block, msg.ToolResult):
            yield from counted_texts(block.content)
        elif isinstance(block, msg.ReasoningItem):
            yield from block.summary
            yield from block.content


def opaque_tokens(data: str) -> int:
    """The estimated tokens of the reasoning base64 ``data`` hides: its decoded bytes at 4 a
    token (what the provider bills is the hidden reasoning, not the encoding)."""
    decoded = len(data) * 3 // 4 - data[-2:].count("=")  # base64 padding decodes to nothing
    return -(-max(decoded, 0) // CHARS_PER_TOKEN)


def _image_json(block: msg.Image) -> str:
    return _json({"type": "image", "uri": block.uri, "mediaType": block.media_type})


def content_tokens(content: Sequence[msg.Block], counter: TokenCounter = HEURISTIC_COUNTER) -> int:
    return sum(block_tokens(block, counter) for block in content)


def message_tokens(message: msg.Message | None, counter: TokenCounter = HEURISTIC_COUNTER) -> int:
    """The price of one derived message; a node deriving to nothing costs nothing."""
    if message is None or not message.content:
        return 0
    if message.role is msg.Role.SYSTEM:
        # A system message has no block overhead: the reference prices its whole text at once.
        return counter.count(message.text) + ROLE_OVERHEAD
    return content_tokens(message.content, counter) + ROLE_OVERHEAD


def node_prices(
    events: Sequence[Event], counter: TokenCounter = HEURISTIC_COUNTER
) -> dict[int, int]:
    """The price of each surface node ``events`` put on the surface, by seq: its derived message
    priced with ``counter`` (the session's route's tokenizer) once, as it is written; only a
    change of route family prices it again."""
    return {
        event.seq: message_tokens(event.derived_message(), counter)
        for event in events
        if event.op is not None
    }


def tools_json(tools: Sequence[msg.Tool]) -> str:
    """Tools as the JSON array a provider body carries (the schema text spliced in verbatim)."""
    items = (
        f'{{"name":{_json(tool.name)},"description":{_json(tool.description)},'
        f'"parameters":{tool.parameters_json or "{}"}}}'
        for tool in tools
    )
    return "[" + ",".join(items) + "]"


def tools_tokens(tools: Sequence[msg.Tool], counter: TokenCounter = HEURISTIC_COUNTER) -> int:
    """The price of a tool set, remembered: a harness sends the same tool set every step, and a
    real tokenizer over kilobytes of schemas would otherwise cost a millisecond a step (over a
    1 MiB set, half a second: ``tools_price_known``)."""
    if not tools:
        return 0
    key, size = _price_key(tools, counter.name)
    return TOOL_PRICES.get(key, size, lambda: counter.count(tools_json(tools)) + BLOCK_OVERHEAD)


def tools_price_known(tools: Sequence[msg.Tool], counter_name: str) -> bool:
    """Whether the price of ``tools`` with the tokenizer ``counter_name`` is remembered. A
    caller counts an unknown large set ahead, where counting cannot hold the event loop
    (``app/pricing.py``: ``counted_ahead``): DeepSeek's tokenizer takes half a second over a
    1 MiB set."""
    if not tools:
        return True
    key, _ = _price_key(tools, counter_name)
    return TOOL_PRICES.lookup(key) is not None


def _price_key(
    tools: Sequence[msg.Tool], counter_name: str
) -> tuple[tuple[str, tuple[str, ...] | str], int]:
    """A tool set's key among the remembered prices, and the bytes its entry holds: the set's
    own strings while the memo keeps a set that large (compared in C, nothing hashed again);
    a larger set's digest (its JSON hashed each time, ~1 ms a MiB), so that its price, the
    costliest to count, is remembered too."""
    key = tool_set_key(tools)
    size = _size(key)
    if TOOL_PRICES.keeps(size):
        return (counter_name, key), size
    return (counter_name, tools_digest(tools)), _DIGEST_ENTRY_BYTES


def tools_digest(tools: Sequence[msg.Tool]) -> str:
    """The digest of a tool set's JSON (what a request key holds), remembered like its price:
    writing the JSON of 40 tools' schemas (45 KB) takes ~0.2 ms, which every step paid."""
    key = tool_set_key(tools)
    return TOOL_DIGESTS.get(key, _size(key), lambda: message_digest(tools_json(tools).encode()))


def tool_set_key(tools: Sequence[msg.Tool]) -> tuple[str, ...]:
    """A tool set as a flat tuple of its strings: hashed and compared in C (a tuple of the
    ``Tool`` dataclasses is hashed and compared field by field in Python, ~1 us a tool), and
    a string's hash is kept with it, so the second lookup of a step hashes nothing again."""
    return tuple(
        part for tool in tools for part in (tool.name, tool.description, tool.parameters_json)
    )


def seen_tool_set(tools: tuple[msg.Tool, ...]) -> tuple[msg.Tool, ...]:
    """``tools``, or the equal set seen before as the very objects first seen (``TOOL_SETS``).
    A harness sends the same set every step, parsed into new strings each time; every memo
    keyed by the set, and the header's compare with the last header's, then compares the
    strings by identity instead of reading megabytes again: a 12 MiB set is compared once a
    step, where each of five memos and the header compared it before (BENCHMARKS, fifteenth
    round)."""
    key = tool_set_key(tools)
    return TOOL_SETS.get(key, _size(key), lambda: tools)


def _size(key: tuple[str, ...]) -> int:
    return sum(map(len, key))


# The tool sets' prices (by tokenizer) and digests, each within 4 MiB of tool sets
# (domain/memo.py); the price of a set too large to keep is kept by its digest.
TOOL_PRICES: BoundedMemo[tuple[str, tuple[str, ...] | str], int] = BoundedMemo(4 * 1024 * 1024)
# What a price kept by a tool set's digest holds (the digest, the tokenizer's name, the price).
_DIGEST_ENTRY_BYTES = 128
TOOL_DIGESTS: BoundedMemo[tuple[str, ...], str] = BoundedMemo(4 * 1024 * 1024)
# The tool sets last seen, as their first objects, within 4 MiB (``seen_tool_set``).
TOOL_SETS: BoundedMemo[tuple[str, ...], tuple[msg.Tool, ...]] = BoundedMemo(4 * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class PricedNode:
    """A surface node as accounting sees it."""

    seq: int
    tokens: int
    is_system: bool


# Providers whose usage reports cached input apart from ``input_tokens`` (Anthropic's
# cache_read_input_tokens and cache_creation_input_tokens); OpenAI's and DeepSeek's prompt
# tokens include the cached ones.
_INPUT_EXCLUDES_CACHE = frozenset({"anthropic"})


def observed_input_tokens(
    provider: str, input_tokens: int, cache_read_tokens: int, cache_write_tokens: int
) -> int:
    """The whole prompt as the provider counted it, from the usage it reported."""
    if provider in _INPUT_EXCLUDES_CACHE:
        return input_tokens + cache_read_tokens + cache_write_tokens
    return input_tokens


@dataclass(frozen=True, slots=True)
class Calibration:
    """The estimate against the provider's count: observed prompt tokens over the estimated
    request totals, summed over the requests whose usage was recorded."""

    requests: int = 0
    observed_tokens: int = 0
    estimated_tokens: int = 0

    @property
    def ratio(self) -> float:
        """Observed / estimated (0 when nothing was observed): 1.0 is a perfect estimate."""
        return self.observed_tokens / self.estimated_tokens if self.estimated_tokens else 0.0

    def add(self, observed: int, estimated: int) -> Calibration:
        return Calibration(
            self.requests + 1, self.observed_tokens + observed, self.estimated_tokens + estimated
        )


@dataclass(frozen=True, slots=True)
class TokenBreakdown:
    system_tokens: int
    tools_tokens: int
    message_tokens: int
    tokenizer: str = HEURISTIC
    calibration: Calibration = Calibration()

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.tools_tokens + self.message_tokens


def breakdown(
    nodes: Sequence[PricedNode],
    tools: Sequence[msg.Tool],
    counter: TokenCounter = HEURISTIC_COUNTER,
    *,
    total: int | None = None,
    calibration: Calibration | None = None,
) -> TokenBreakdown:
    """System = the last non-empty system node; every other visible node is a message.

    Superseded prompts still visible in history count as messages; dormant empty nodes cost 0.
    The nodes carry their stored prices; ``counter`` prices the tools and names the breakdown.
    ``nodes`` is the whole surface in order, or only its system nodes when ``total`` gives the
    whole surface's price (the running price a session keeps, so Inspect reads no other node).
    """
    system = next((n.tokens for n in reversed(nodes) if n.is_system and n.tokens > 0), 0)
    if total is None:
        total = sum(node.tokens for node in nodes)
    tools_price = tools_tokens(tools, counter)
    return TokenBreakdown(
        system, tools_price, total - system, counter.name, calibration or Calibration()
    )


class DivergenceReason(StrEnum):
    NONE = "none"
    FIRST_REQUEST = "first_request"
    SYSTEM_CHANGED = "system_changed"
    TOOLS_CHANGED = "tools_changed"
    MESSAGES_CHANGED = "messages_changed"
    MODEL_CHANGED = "model_changed"
    SERIES_START = "series_start"


def message_digest(encoded: bytes) -> str:
    return hashlib.sha256(encoded).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class RequestKey:
    """What a provider's cache keys on before the messages: the route and the tools."""

    provider: str
    model: str
    tools_digest: str
    tools_tokens: int


@dataclass(frozen=True, slots=True)
class PreviousRequest:
    """All the forecast keeps of the previous request: its key and how many messages it had.

    Between two requests the surface only grows at its end, except where a replacement
    shadows nodes; the session records the first shadowed position, so the previous request's
    messages never need to be stored or compared one by one.
    """

    key: RequestKey
    message_count: int


@dataclass(frozen=True, slots=True)
class CacheForecast:
    reused_messages: int
    reused_tokens: int
    total_messages: int
    total_tokens: int
    divergence_index: int
    divergence_reason: DivergenceReason


@dataclass(frozen=True, slots=True)
class RequestTotals:
    """The current request's messages as the forecast needs them, without the messages:
    how many and their price; how many lead it unchanged since the previous request (the
    previous count, or fewer when a node before its end was shadowed) and their price; and
    whether the first shadowed node was a system node."""

    messages: int
    tokens: int
    unchanged_messages: int
    unchanged_tokens: int
    at_system: bool


def forecast_totals(
    previous: PreviousRequest | None,
    current: RequestKey,
    totals: RequestTotals,
    *,
    starts_series: bool,
) -> CacheForecast:
    """How much of the current request is a byte-identical prefix of the previous one, and why
    it diverges, from totals the caller keeps (storage keeps them per session), so the forecast
    costs the same whatever the session's length.

    Tools precede the messages in a provider's cache key, so a model or tool change reuses
    nothing. Otherwise the reused prefix is every previous message when nothing was shadowed
    since, else the messages before the first shadowed node. That equals the longest
    byte-identical prefix (the property tests compare the two) except when a replacement
    reproduces exactly the bytes it replaced, where the forecast stays on the cautious side.
    """
    total = current.tools_tokens + totals.tokens
    count = totals.messages

    def cold(reason: DivergenceReason) -> CacheForecast:
        return CacheForecast(0, 0, count, total, 0, reason)

    if previous is None:
        return cold(DivergenceReason.FIRST_REQUEST)
    before = previous.key
    if (before.provider, before.model) != (current.provider, current.model):
        return cold(DivergenceReason.MODEL_CHANGED)
    if before.tools_digest != current.tools_digest:
        return cold(DivergenceReason.TOOLS_CHANGED)
    shared = min(previous.message_count, totals.unchanged_messages)
    reused_tokens = current.tools_tokens + totals.unchanged_tokens
    if shared == previous.message_count:
        reason = DivergenceReason.NONE
    elif starts_series:
        reason = DivergenceReason.SERIES_START
    else:
        at_system = totals.at_system
        reason = DivergenceReason.SYSTEM_CHANGED if at_system else DivergenceReason.MESSAGES_CHANGED
    return CacheForecast(shared, reused_tokens, count, total, shared, reason)
