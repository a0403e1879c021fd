"""DeepSeek V4's token count of an ASCII text, as the sum of its pre-tokens' remembered counts.

DeepSeek's ``tokenizer.json`` has no normalizer; its pre-tokenizer splits a text in three
regular-expression passes (digits in threes; runs of CJK; words, punctuation and spaces) and
maps bytes to characters, and its BPE then merges inside each piece on its own. So a text's
count is the sum of its pieces' counts. Hugging Face ``tokenizers`` runs those passes on
Oniguruma, which takes ~50 of the ~55 µs a 200-character text costs to encode, and counting a
step's two new texts was the largest single site of a warm step (docs/BENCHMARKS.md,
seventeenth round). For ASCII text, where each Unicode class of the passes is a short list
(``\\p{N}`` the digits, ``\\p{L}`` the Latin letters, ``\\p{M}`` nothing, ``\\p{P}`` and ``\\p{S}``
together ``string.punctuation``, ``\\s`` the six ASCII white spaces), the passes are written
here with Python's ``re``, and each piece's BPE count is remembered: a count is then a split
and a few dictionary lookups (~15 µs).

Not counted here (``count`` answers None and the caller asks the tokenizer): a text with any
non-ASCII character or a control character other than the spaces; one that holds an added
token (``<think>``, ``<|EOT|>``…), which the tokenizer matches before pre-tokenizing; and one
over 64 Ki characters (its pieces would be one large list; such texts are counted in a thread
with the tokenizer's batch API, which releases the GIL: ``tokenizers.counter_off_the_loop``).

The tokenizer itself is the oracle: ``tests/unit/test_piece_counts.py`` compares the pieces
and the counts with it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable

# The ASCII members of \p{P} and \p{S}: !"#%&'()*,-./:;?@[\]_{} and $+<=>^`|~.
_PUNCTUATION = re.escape(string.punctuation)
# Oniguruma's \s on ASCII (the Unicode White_Space property), not Python's (which adds \x1c-\x1f).
_SPACE = r"\t\n\x0b\x0c\r "

# The passes as one expression, for a text with no control character but the spaces (the only
# ASCII characters pass 3 can leave between its matches, which it keeps as pieces too). Pass 1's
# groups of digits come first; pass 3's alternatives then run on what lies between them, so none
# takes a digit, and "not followed by a non-space" also holds before a digit (where pass 3's
# piece ended). Pass 2, runs of CJK, finds nothing in ASCII. Pass 3 as DeepSeek writes it:
#   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
#   | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
_PIECES = re.compile(
    r"[0-9]{1,3}"
    rf"|[{_PUNCTUATION}][A-Za-z]+"
    rf"|[^\r\n0-9A-Za-z{_PUNCTUATION}]?[A-Za-z]+"
    rf"| ?[{_PUNCTUATION}]+[\r\n]*"
    rf"|[{_SPACE}]*[\r\n]+"
    rf"|[{_SPACE}]+(?![^{_SPACE}0-9])"
    rf"|[{_SPACE}]+"
)
# What pass 3 can leave unmatched: a text holding one is left to the tokenizer.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")

# A piece this long is counted but not remembered (a run of spaces, a long identifier).
_REMEMBERED_CHARS = 32
# Longer texts are left to the tokenizer (the module docstring).
_MAX_CHARS = 64 * 1024
# Pieces remembered at most, then forgotten all at once: a few MiB a worker.
_REMEMBERED_PIECES = 32_768


def ascii_pieces(text: str) -> list[str]:
    """The pre-tokens of an ASCII ``text`` with no control character but the spaces, before the
    byte-level mapping (which neither splits nor joins), as DeepSeek V4's pre-tokenizer cuts
    them: every character in exactly one, in order."""
    return _PIECES.findall(text)


def byte_level(piece: str) -> str:
    """An ASCII ``piece`` as the byte-level pre-tokenizer hands it to the BPE: GPT-2's map of
    bytes to characters, where the printable ASCII stand for themselves and the space, the
    controls and DEL become U+0100 on (``bytes_to_unicode``)."""
    return piece.translate(_BYTE_LEVEL)


def _byte_level_table() -> dict[int, str]:
    printable = range(ord("!"), ord("~") + 1)
    others = [byte for byte in range(128) if byte not in printable]
    # GPT-2 numbers the unprintable bytes from 256 in byte order; those over 127 come after
    # every ASCII one, so the ASCII ones take 256 + their rank among the unprintable.
    return {byte: chr(256 + rank) for rank, byte in enumerate(others)}


_BYTE_LEVEL = _byte_level_table()


class PieceCounter:
    """Counts ASCII texts piece by piece, each piece's count made once by ``count_piece`` (the
    tokenizer's BPE on that piece alone) and remembered."""

    def __init__(self, count_piece: Callable[[str], int], added_tokens: Iterable[str]) -> None:
        self._count_piece = count_piece
        added = sorted({token for token in added_tokens if token.isascii()}, key=len, reverse=True)
        self._added = re.compile("|".join(map(re.escape, added))) if added else None
        # Each added token's first character: a text with none of them holds none (DeepSeek's
        # all begin with "<", so this is one ``in`` a text).
        self._added_starts = {token[0] for token in added}
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int | None:
        """``text``'s count, or None when it is not ASCII, holds a control character other than
        the spaces or an added token, or is longer than 64 Ki characters."""
        if len(text) > _MAX_CHARS or not text.isascii() or _CONTROL.search(text):
            return None
        if self._holds_an_added_token(text):
            return None
        pieces = ascii_pieces(text)
        try:
            return sum(map(self._counts.__getitem__, pieces))
        except KeyError:
            return sum(map(self._counted, pieces))

    def _counted(self, piece: str) -> int:
        found = self._counts.get(piece)
        if found is None:
            found = self._count_piece(piece)
            if len(piece) <= _REMEMBERED_CHARS:
                if len(self._counts) >= _REMEMBERED_PIECES:
                    self._counts.clear()  # simpler than an order kept per lookup, and as rare
                self._counts[piece] = found
        return found

    def _holds_an_added_token(self, text: str) -> bool:
        return any(start in text for start in self._added_starts) and bool(
            self._added and self._added.search(text)
        )

    @property
    def remembered(self) -> int:
        return len(self._counts)
