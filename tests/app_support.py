"""What the use-case tests share: on the fake storage (``tests/unit/app``) and on PostgreSQL
(``tests/integration``)."""

from __future__ import annotations

from admission_service.app.commands import RouteRequest
from admission_service.domain.catalog import parse_catalog
from admission_service.domain.messages import Message, Role, Text

CATALOG = parse_catalog(
    {
        "models": [
            {"id": "deepseek-flash", "provider": "deepseek", "system_prompt_update": "in-history"}
        ]
    }
)
# A route the catalog knows: the system prompt is updated in the history.
ROUTE = RouteRequest("deepseek", "deepseek-flash", 128_000)


def user(text: str) -> Message:
    return Message(Role.USER, (Text(text),))
