"""The request ledger as the use cases' values: the JSON the app writes into a ``requests``
row's ``forecast`` and ``observed`` columns and reads back (``storage.codec`` encodes it), a
row as a ``LedgerEntry``, and the calibration of the estimate over the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from admission_service.app.commands import LedgerEntry, Usage
from admission_service.app.ports import LedgerRow
from admission_service.domain.accounting import CacheForecast, Calibration, DivergenceReason

_FORECAST_FIELDS = tuple(field.name for field in fields(CacheForecast))


def forecast_json(value: CacheForecast) -> dict[str, Any]:
    """A forecast as the ledger row's JSON (its fields by name; the reason by its value)."""
    data = {name: getattr(value, name) for name in _FORECAST_FIELDS}
    return {**data, "divergence_reason": value.divergence_reason.value}


def forecast_from_json(data: dict[str, Any]) -> CacheForecast:
    """The forecast in a ledger row's JSON (which also holds other keys)."""
    values = {name: data[name] for name in _FORECAST_FIELDS}
    return CacheForecast(
        **{**values, "divergence_reason": DivergenceReason(values["divergence_reason"])}
    )


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def ledger_entry_of(row: LedgerRow) -> LedgerEntry:
    """A ``requests`` row as a ledger entry."""
    stored, observed = row.forecast_json(), row.observed_json()
    return LedgerEntry(
        row.request_index,
        row.admission_id,
        row.attempt,
        forecast_from_json(stored),
        Usage(**observed) if observed is not None else None,
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
