"""Opaque reasoning is priced as the reasoning it hides (billed as input when sent back), not
as its encoding, whatever the route's tokenizer; a reasoning item's texts are text."""

from __future__ import annotations

import base64

from admission_service.domain.accounting import (
    BLOCK_OVERHEAD,
    block_tokens,
    message_tokens,
    opaque_tokens,
)
from admission_service.domain.messages import Message, ReasoningItem, RedactedReasoning, Role

HIDDEN = "The user wants the file; read it, then summarise the three functions. " * 10


class Words:
    """A counter that is not the heuristic: one token per word."""

    name = "words"

    @staticmethod
    def count(text: str) -> int:
        return len(text.split())


def test_opaque_data_is_priced_as_the_bytes_it_decodes_to() -> None:
    data = base64.b64encode(HIDDEN.encode()).decode()
    assert opaque_tokens(data) == -(-len(HIDDEN) // 4)
    assert opaque_tokens("") == 0
    block = RedactedReasoning("anthropic", data)
    assert block_tokens(block) == block_tokens(block, Words()) == opaque_tokens(data) + 4


def test_a_reasoning_item_counts_its_texts_with_the_route_counter() -> None:
    item = ReasoningItem("rs_1", "gAAAAABk", ("plan the read", "then answer"), ("step one",))
    assert block_tokens(item, Words()) == opaque_tokens("gAAAAABk") + 2 + 3 + 2 + BLOCK_OVERHEAD
    message = Message(Role.ASSISTANT, (item, RedactedReasoning("anthropic", "QUJD")))
    assert message_tokens(message, Words()) == (
        block_tokens(item, Words()) + opaque_tokens("QUJD") + BLOCK_OVERHEAD + 4
    )
