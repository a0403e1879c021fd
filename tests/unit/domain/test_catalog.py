"""Model catalog validation and capability resolution (SPEC §2 "Capability")."""

from __future__ import annotations

import pytest
from admission_service.domain.catalog import Capability, parse_catalog, resolve_route
from admission_service.domain.errors import InvalidModelInfo
from admission_service.domain.series import CapabilitySource

CATALOG = parse_catalog(
    {
        "models": [
            {
                "id": "deepseek-flash",
                "provider": "deepseek",
                "system_prompt_update": "in-history",
                "input": ["text", "image"],
            },
            {"id": "plain"},
        ]
    }
)


def resolve(
    model: str, requested: Capability, provider: str = "deepseek"
) -> tuple[bool, CapabilitySource]:
    route = resolve_route(
        CATALOG,
        provider=provider,
        model=model,
        context_window=1,
        system_prompt_update=requested,
        tool_update=Capability.UNSPECIFIED,
    )
    return route.in_history, route.capability_source


def test_resolution_prefers_the_request_then_the_catalog_then_replace() -> None:
    assert resolve("deepseek-flash", Capability.UNSPECIFIED) == (True, CapabilitySource.CATALOG)
    assert resolve("deepseek-flash", Capability.REPLACE) == (False, CapabilitySource.REQUEST)
    assert resolve("other", Capability.IN_HISTORY) == (True, CapabilitySource.REQUEST)
    assert resolve("plain", Capability.UNSPECIFIED) == (False, CapabilitySource.CATALOG)
    assert resolve("unknown", Capability.UNSPECIFIED) == (False, CapabilitySource.DEFAULT)
    # Names and providers imply nothing: only the exact catalog entry declares support.
    assert resolve("deepseek-flash", Capability.UNSPECIFIED, provider="proxy") == (
        False,
        CapabilitySource.DEFAULT,
    )


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ([], "models"),
        ({"models": "x"}, "models"),
        ({"models": [1]}, r"models\[0\]"),
        ({"models": [{"id": ""}]}, r"models\[0\]\.id"),
        ({"models": [{"id": "a"}, {"id": "a"}]}, r"models\[1\]\.id"),
        ({"models": [{"id": "a", "provider": 3}]}, r"models\[0\]\.provider"),
        ({"models": [{"id": "a", "input": ["audio"]}]}, r"models\[0\]\.input"),
        ({"models": [{"id": "a", "colour": "red"}]}, r"models\[0\]"),
        ({"models": [{"id": "a", "system_prompt_update": "append"}]}, "system_prompt_update"),
        ({"models": [{"id": "a", "tool_update": True}]}, "tool_update"),
    ],
)
def test_invalid_catalogs_are_refused(document: object, field: str) -> None:
    with pytest.raises(InvalidModelInfo, match=field) as error:
        parse_catalog(document)
    assert error.value.reason == "INVALID_MODEL_INFO"
