"""A token count of an ASCII text as the sum of its pre-tokens' remembered counts, for the
tokenizers whose pre-tokenizing dominates a short text's count: DeepSeek V4's and Claude's.

Both are byte-level BPE tokenizers with no normalizer that touches ASCII (Claude's NFKC leaves
it as it is): a regular expression splits the text into pieces and the BPE merges inside each
piece on its own, so a text's count is the sum of its pieces' counts. Their Rust libraries run
the expressions on Oniguruma, which takes ~50 of the ~55 µs DeepSeek's tokenizer spends on a
200-character text (Claude's: 44 µs), and counting a step's two new texts was the largest single
site of a warm step (docs/BENCHMARKS.md, seventeenth round). For ASCII text, where each Unicode
class of the expressions is a short list (``\\p{N}`` the digits, ``\\p{L}`` the Latin letters,
``\\p{M}`` nothing, ``\\p{P}`` and ``\\p{S}`` together ``string.punctuation``, ``\\s`` the six
ASCII white spaces), they are written here with Python's ``re``, and each piece's count is
remembered: a count is then one ``findall`` and a dictionary lookup a piece (~9 µs).

Left to the tokenizer (``PieceCounter.by_pieces`` answers None, and ``count`` asks it): a text
with a non-ASCII character or one its expression leaves unsplit; one that holds an added token
(``<think>``, ``<EOT>``…), which a tokenizer matches before pre-tokenizing; and one over 64 Ki
characters (its pieces would be one large list; such texts are counted in a thread with the
tokenizer's batch API where it has one: ``tokenizers.counter_off_the_loop``).

The tokenizers themselves are the oracle: ``tests/unit/test_piece_counts.py`` compares the
pieces and the counts with them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# The ASCII members of \p{P} and \p{S}: !"#%&'()*,-./:;?@[\]_{} and $+<=>^`|~.
_PUNCTUATION = re.escape(string.punctuation)
# Oniguruma's \s on ASCII (the Unicode White_Space property), not Python's (which adds \x1c-\x1f).
_SPACE = r"\t\n\x0b\x0c\r "

# DeepSeek V4's three passes as one expression, for a text with no control character but the
# spaces (the only ASCII characters its third pass can leave between its matches). Pass 1's
# groups of digits come first; pass 3's alternatives then run on what lies between them, so none
# takes a digit, and "not followed by a non-space" also holds before a digit (where pass 3's
# piece ended). Pass 2, runs of CJK, finds nothing in ASCII. As DeepSeek's tokenizer.json writes
# them: \p{N}{1,3}; [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+; and
#   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
#   | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
_DEEPSEEK_V4 = re.compile(
    r"[0-9]{1,3}"
    rf"|[{_PUNCTUATION}][A-Za-z]+"
    rf"|[^\r\n0-9A-Za-z{_PUNCTUATION}]?[A-Za-z]+"
    rf"| ?[{_PUNCTUATION}]+[\r\n]*"
    rf"|[{_SPACE}]*[\r\n]+"
    rf"|[{_SPACE}]+(?![^{_SPACE}0-9])"
    rf"|[{_SPACE}]+"
)

# Claude's: GPT-2's byte-level expression, which splits every character:
#   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
_GPT2 = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+"
    rf"| ?[^{_SPACE}A-Za-z0-9]+"
    rf"|[{_SPACE}]+(?![^{_SPACE}])"
    rf"|[{_SPACE}]+"
)


@dataclass(frozen=True, slots=True)
class AsciiSplit:
    """A tokenizer's pre-tokenizer on ASCII text: ``pieces`` finds every piece, each character
    in exactly one, for a text without any character of ``unsplit`` (which the tokenizer's
    expression leaves between its matches)."""

    pieces: re.Pattern[str]
    unsplit: re.Pattern[str] | None = None

    def split(self, text: str) -> list[str] | None:
        """``text``'s pieces before the byte-level mapping (which neither splits nor joins), or
        None when it holds a character left unsplit."""
        if self.unsplit is not None and self.unsplit.search(text):
            return None
        return self.pieces.findall(text)


DEEPSEEK_V4 = AsciiSplit(_DEEPSEEK_V4, unsplit=re.compile(r"[\x00-\x08\x0e-\x1f\x7f]"))
CLAUDE = AsciiSplit(_GPT2)

# A piece this long is counted but not remembered (a run of spaces, a long identifier).
_REMEMBERED_CHARS = 32
# Longer texts are left to the tokenizer (the module docstring).
_MAX_CHARS = 64 * 1024
# Pieces remembered at most, then forgotten all at once: a few MiB a worker.
_REMEMBERED_PIECES = 32_768


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


_Trie = dict[str, "_Trie"]  # a character to the rest; "" where a word ends


def _any_of(words: Iterable[str]) -> str:
    """An expression that matches where any of ``words`` starts, written as their trie:
    DeepSeek's 420 ASCII added tokens share long prefixes (``<|place_holder_``…), and as one
    alternative a word ``re`` tried them one by one at each ``<`` (10 µs a 200-character text
    of code, against 0.3)."""
    trie: _Trie = {}
    for word in words:
        node = trie
        for character in word:
            node = node.setdefault(character, {})
        node[""] = {}

    def expression(node: _Trie) -> str:
        branches = [re.escape(key) + expression(rest) for key, rest in sorted(node.items()) if key]
        if not branches:
            return ""
        either = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{either})?" if "" in node else either

    return expression(trie)


class PieceCounter:
    """A tokenizer's count of a text: by pieces (``split``) where this module can, each piece's
    count made once by ``count_piece`` (the tokenizer's BPE on that piece alone) and
    remembered; by ``count_text`` (the tokenizer on the whole text) where it cannot."""

    def __init__(
        self,
        split: AsciiSplit,
        count_piece: Callable[[str], int],
        count_text: Callable[[str], int],
        added_tokens: Iterable[str],
    ) -> None:
        self._split = split
        self._count_piece = count_piece
        self._count_text = count_text
        added = {token for token in added_tokens if token.isascii()}
        self._added = re.compile(_any_of(added)) if added else None
        # Each added token's first character: a text with none of them holds none (DeepSeek's
        # and Claude's all begin with "<", so this is one ``in`` a text).
        self._added_starts = {token[0] for token in added}
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        counted = self.by_pieces(text)
        return self._count_text(text) if counted is None else counted

    def by_pieces(self, text: str) -> int | None:
        """``text``'s count by its pieces, or None when it is not ASCII, holds a character the
        split leaves alone or an added token, or is longer than 64 Ki characters."""
        if len(text) > _MAX_CHARS or not text.isascii() or self._holds_an_added_token(text):
            return None
        pieces = self._split.split(text)
        if pieces is None:
            return None
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
        if self._added is None or not any(start in text for start in self._added_starts):
            return False
        return self._added.search(text) is not None

    @property
    def remembered(self) -> int:
        return len(self._counts)
