"""The model catalog and capability resolution (SPEC §2 "Capability").

A route's ``system_prompt_update`` is declared per request or, when unspecified, resolved from
the catalog by exact model id. Absence means "rewrite the head". Names and protocol families
imply nothing: only an exact catalog entry declares a capability.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from admission_service.domain.errors import InvalidModelInfo
from admission_service.domain.series import CapabilitySource, Route

IN_HISTORY = "in-history"
KNOWN_INPUTS = frozenset({"text", "image"})


class Capability(StrEnum):
    """A capability as a request states it."""

    UNSPECIFIED = "unspecified"
    REPLACE = "replace"
    IN_HISTORY = "in_history"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    model: str
    provider: str | None
    system_prompt_in_history: bool
    tool_update: bool
    inputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Catalog:
    models: Mapping[str, ModelInfo]

    def lookup(self, provider: str, model: str) -> ModelInfo | None:
        info = self.models.get(model)
        if info is None or (info.provider is not None and info.provider != provider):
            return None
        return info


def _capability(entry: Mapping[str, object], key: str, where: str) -> bool:
    value = entry.get(key)
    if value is None:
        return False
    if value != IN_HISTORY:
        raise InvalidModelInfo(f"{where}.{key}", f"must be {IN_HISTORY!r} or absent, not {value!r}")
    return True


def parse_catalog(data: object) -> Catalog:
    """Validate a parsed catalog document ``{models: [{id, provider?, ...}]}``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("models"), list):
        raise InvalidModelInfo("models", "the catalog must be a mapping with a 'models' list")
    models: dict[str, ModelInfo] = {}
    for index, entry in enumerate(data["models"]):
        where = f"models[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidModelInfo(where, "each model must be a mapping")
        unknown = set(entry) - {"id", "provider", "system_prompt_update", "tool_update", "input"}
        if unknown:
            raise InvalidModelInfo(where, f"unknown keys {sorted(unknown)}")
        model_id, provider = entry.get("id"), entry.get("provider")
        if not isinstance(model_id, str) or not model_id:
            raise InvalidModelInfo(f"{where}.id", "must be a non-empty string")
        if model_id in models:
            raise InvalidModelInfo(f"{where}.id", f"duplicate model {model_id!r}")
        if provider is not None and not isinstance(provider, str):
            raise InvalidModelInfo(f"{where}.provider", "must be a string")
        inputs = entry.get("input", ["text"])
        if not isinstance(inputs, list) or not set(inputs) <= KNOWN_INPUTS:
            raise InvalidModelInfo(f"{where}.input", f"must be a list drawn from {KNOWN_INPUTS}")
        models[model_id] = ModelInfo(
            model_id,
            provider,
            _capability(entry, "system_prompt_update", where),
            _capability(entry, "tool_update", where),
            tuple(inputs),
        )
    return Catalog(models)


def _resolve(requested: Capability, cataloged: bool | None) -> tuple[bool, CapabilitySource]:
    if requested is not Capability.UNSPECIFIED:
        return requested is Capability.IN_HISTORY, CapabilitySource.REQUEST
    if cataloged is not None:
        return cataloged, CapabilitySource.CATALOG
    return False, CapabilitySource.DEFAULT


def resolve_route(
    catalog: Catalog,
    *,
    provider: str,
    model: str,
    context_window: int,
    system_prompt_update: Capability,
    tool_update: Capability,
) -> Route:
    """The route an attempt is prepared for, with capabilities resolved and their source."""
    info = catalog.lookup(provider, model)
    in_history, source = _resolve(
        system_prompt_update, info.system_prompt_in_history if info else None
    )
    tools_in_history, _ = _resolve(tool_update, info.tool_update if info else None)
    return Route(provider, model, context_window, in_history, tools_in_history, source)
