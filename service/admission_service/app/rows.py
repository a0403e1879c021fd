"""Stored rows as the use cases' values: events, ledger entries, session info, decoded messages
(the JSON the app writes into the ledger's ``forecast`` and ``observed`` columns included)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from admission_service.app.commands import LedgerEntry, SessionInfo, Usage
from admission_service.domain import codec
from admission_service.domain.accounting import CacheForecast, Calibration, DivergenceReason
from admission_service.domain.events import Event
from admission_service.domain.messages import Message
from admission_service.storage.repository import SessionRecord


def forecast_json(value: CacheForecast) -> dict[str, Any]:
    return {
        "reused_messages": value.reused_messages,
        "reused_tokens": value.reused_tokens,
        "total_messages": value.total_messages,
        "total_tokens": value.total_tokens,
        "divergence_index": value.divergence_index,
        "divergence_reason": value.divergence_reason.value,
    }


def forecast_from_json(data: dict[str, Any]) -> CacheForecast:
    return CacheForecast(
        data["reused_messages"],
        data["reused_tokens"],
        data["total_messages"],
        data["total_tokens"],
        data["divergence_index"],
        DivergenceReason(data["divergence_reason"]),
    )


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def session_info(record: SessionRecord) -> SessionInfo:
    return SessionInfo(
        record.session_id,
        record.create_time,
        record.update_time,
        record.revision,
        record.next_seq,
        record.series.replace_generation,
    )


def decode_message(message: bytes) -> Message:
    """A surface node's stored message."""
    return codec.message_from_json(codec.loads(message))


def ledger_entry_of(row: Any) -> LedgerEntry:
    """A ``requests`` row as a ledger entry."""
    stored = codec.loads(row.forecast)
    return LedgerEntry(
        row.request_index,
        row.admission_id,
        row.attempt,
        forecast_from_json(stored),
        Usage(**codec.loads(row.observed)) if row.observed is not None else None,
        stored.get("provider", ""),
    )


def calibration_of(ledger: Sequence[LedgerEntry], provider: str) -> Calibration:
    """The estimate against the provider's counts over the ledger's requests on ``provider``
    whose usage was recorded."""
    calibration = Calibration()
    for entry in ledger:
        observed = entry.observed_input_tokens
        if observed is not None and entry.provider == provider:
            calibration = calibration.add(observed, entry.forecast.total_tokens)
    return calibration


def event_of(row: Any) -> Event:
    """An ``events`` row as a domain event."""
    return codec.event_from_json(
        {
            "seq": row.seq,
            "kind": row.kind,
            "turn": row.turn,
            "step": row.step,
            "surface_op": _surface_op(row),
            "source_seqs": list(row.source_seqs),
            "admission_id": row.admission_id or "",
            "payload": codec.loads(row.payload),
        }
    )


def _surface_op(row: Any) -> dict[str, Any] | None:
    if row.surface_op == "append":
        return {"op": "append"}
    if row.surface_op == "replace":
        return {"op": "replace", "start_seq": row.replace_start_seq, "end_seq": row.replace_end_seq}
    return None
