"""Session bounds (issue 13): nothing a session holds or returns grows without a limit.

Limits are per request (``validation``); these bound what requests add up to. Each check raises a
``ResourceExhausted`` whose reason names the bound, with the bound and the value in its metadata
and a message saying what to do; it runs before the commit, so a refused call commits nothing.
"""

from __future__ import annotations

from typing import NoReturn

from admission_service.app.limits import Limits
from admission_service.domain.errors import (
    ResourceExhausted,
    ResponseTooLarge,
    SessionSurfaceBytesExceeded,
    SessionSurfaceNodesExceeded,
)
from admission_service.domain.session import Session
from admission_service.domain.stored import Growth

_COMPACT = (
    "compact the session (PlanCompaction, Compact) to free room; a compaction is always allowed"
)


def check_session_growth(record: Session, growth: Growth, limits: Limits) -> None:
    """Refuse a transaction that grows the surface past a bound. One that shrinks it (a
    compaction, a consolidation) passes even above the bound, so a session can always get back
    under it."""
    _check_surface(
        SessionSurfaceBytesExceeded,
        "bytes",
        record.surface_bytes,
        growth.surface_bytes,
        limits.max_session_surface_bytes,
    )
    _check_surface(
        SessionSurfaceNodesExceeded,
        "nodes",
        record.surface_nodes,
        growth.surface_nodes,
        limits.max_session_surface_nodes,
    )


def _check_surface(
    error: type[ResourceExhausted], unit: str, before: int, growth: int, limit: int
) -> None:
    after = before + growth
    if growth > 0 and after > limit:
        bound = f"max_session_surface_{unit}"
        raise error(
            f"the session's surface would hold {after} {unit}, over the bound of {limit} "
            f"(PAS_LIMIT_{bound.upper()}): {_COMPACT}",
            bound=bound,
            limit=str(limit),
            value=str(after),
        )


def check_derived_request_size(size: int, limits: Limits, *, streamed: bool = False) -> None:
    """Refuse to return a derived request (what the response carries of it: message frames,
    rendered body or both) larger than a client can receive: gRPC clients refuse messages over
    4 MiB unless configured otherwise, and would be left unable to read their own session. A
    streamed response (StreamAdmit, StreamReconcile) travels in chunks of at most 1 MiB, so
    only the streamed bound, sized for a session at its surface bound, applies to it."""
    if streamed:
        if size > limits.max_streamed_response_bytes:
            _response_too_large(
                f"the derived request is {size} bytes, over the streamed response bound of "
                f"{limits.max_streamed_response_bytes} "
                "(PAS_LIMIT_MAX_STREAMED_RESPONSE_BYTES): ask for one content "
                "(REQUEST_CONTENT_MESSAGES or REQUEST_CONTENT_BODY), a DELTA view, or compact "
                "the session",
                size,
                limits,
                bound="max_streamed_response_bytes",
            )
        return
    if size > limits.max_response_bytes:
        _response_too_large(
            f"the derived request is {size} bytes, over the response bound of "
            f"{limits.max_response_bytes} (PAS_LIMIT_MAX_RESPONSE_BYTES): receive it in chunks "
            "with StreamAdmit or StreamReconcile (the clients' admit_streamed, "
            "reconcile_streamed), ask for one content (REQUEST_CONTENT_MESSAGES or "
            "REQUEST_CONTENT_BODY) or view=REQUEST_VIEW_DELTA with the held_prefix of your "
            "previous response, or compact the session",
            size,
            limits,
        )


def check_new_content_size(chars: int, limits: Limits, *, streamed: bool = False) -> None:
    """Refuse up front a step whose new content alone (``chars`` characters, each at least a
    byte of the response) is over the response bound (the streamed one for a streamed call),
    before its costly counting: the derived request carries it whatever the view."""
    bound = limits.max_streamed_response_bytes if streamed else limits.max_response_bytes
    if chars > bound:
        name = "max_streamed_response_bytes" if streamed else "max_response_bytes"
        _response_too_large(
            f"the step's new messages hold {chars} characters, over the response bound of "
            f"{bound} bytes (PAS_LIMIT_{name.upper()}) whatever the view: send the content "
            "in several steps"
            + ("" if streamed else ", receive the request with StreamAdmit")
            + ", or raise the bound",
            chars,
            limits,
            bound=name,
        )


def _response_too_large(
    message: str, value: int, limits: Limits, *, bound: str = "max_response_bytes"
) -> NoReturn:
    raise ResponseTooLarge(
        message,
        bound=bound,
        limit=str(getattr(limits, bound)),
        value=str(value),
    )


def check_summarization_input_size(size: int, limits: Limits) -> None:
    """Refuse a compaction plan whose summarization input a client could not receive."""
    if size > limits.max_response_bytes:
        _response_too_large(
            f"the summarization input is {size} bytes, over the response bound of "
            f"{limits.max_response_bytes} (PAS_LIMIT_MAX_RESPONSE_BYTES): plan a smaller "
            "range (seq_range, or a larger retain_tokens) and compact in several steps",
            size,
            limits,
        )
