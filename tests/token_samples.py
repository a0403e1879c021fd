# ruff: noqa: RUF001 (the Chinese sample has full-width punctuation, as Chinese text does)
"""English, code and Chinese samples for the token-count tests and the pricing benchmark."""

from __future__ import annotations

ENGLISH = (
    "The Prompt Admission Service decides, per step, how a rendered system prompt and the "
    "step's user messages enter a session's model-visible history, commits that decision "
    "durably and atomically in PostgreSQL, and returns the exact request messages to send. "
) * 8

CODE = (
    '''def project(nodes, rendered, *, in_history, starts_series):
    """The projection rule."""
    if not nodes:
        return (SystemCommit(CommitOp.APPEND, rendered, None, False),)
    head = nodes[0]
    effective = next((n for n in reversed(nodes) if n.text), head)
    if effective.text == rendered:
        return ()
    return tuple(commit for commit in plan(head, effective, rendered) if commit)
'''
    * 4
)

CHINESE = (
    "提示词准入服务在每一步决定渲染后的系统提示词和用户消息如何进入会话的模型可见历史，"
    "并在数据库中持久、原子地提交这一决定，然后返回要发送的确切请求消息。"
) * 8

SAMPLES = {"english": ENGLISH, "code": CODE, "chinese": CHINESE}
