"""Builders for the messages a harness sends most often."""

from __future__ import annotations

from promptadmission.v1 import session_pb2


def text_message(role: session_pb2.MessageRole.ValueType, text: str) -> session_pb2.Message:
    """A message with one text block, for example ``text_message(MESSAGE_ROLE_USER, "Hi")``."""
    return session_pb2.Message(
        role=role, content=[session_pb2.ContentBlock(text=session_pb2.TextBlock(text=text))]
    )


def user_message(text: str) -> session_pb2.Message:
    """A user message with one text block."""
    return text_message(session_pb2.MESSAGE_ROLE_USER, text)


def assistant_message(text: str) -> session_pb2.Message:
    """An assistant message with one text block."""
    return text_message(session_pb2.MESSAGE_ROLE_ASSISTANT, text)
