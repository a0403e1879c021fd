"""A tool set's validation (app/validation.py ``check_tools``): each schema a JSON object within
the depth limit; a valid schema is remembered, so a harness's unchanged tools are not parsed
again every step, and a refusal is never remembered."""

from __future__ import annotations

import json

import pytest
from admission_service.app import validation
from admission_service.app.limits import Limits
from admission_service.domain.errors import InvalidArgument
from admission_service.domain.messages import Tool

LIMITS = Limits()
NESTED = '{"a": {"b": {"c": {}}}}'  # depth 4


@pytest.mark.parametrize("size", [100, 200_000], ids=["small", "over an eighth of the memo"])
def test_a_valid_tool_set_is_parsed_once(size: int) -> None:
    """The same schemas again (equal strings, as the next step's request brings them) are not
    parsed again, whether the set is kept among others or, three of 200 KB, as the last large
    one."""
    schemas = [json.dumps({"type": "object", "description": f"{n}" * size}) for n in range(3)]
    memo = validation.VALID_SCHEMAS
    validation.check_tools([Tool(f"t{n}", "", text) for n, text in enumerate(schemas)], LIMITS)
    misses, hits = memo.misses, memo.hits
    again = ["".join([text[:1], text[1:]]) for text in schemas]  # equal, other strings
    validation.check_tools([Tool(f"t{n}", "", text) for n, text in enumerate(again)], LIMITS)
    assert (memo.misses, memo.hits) == (misses, hits + 1)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [("[1, 2]", "must be a JSON object"), ('{"a": ', "is not valid JSON")],
)
def test_a_refused_schema_is_refused_every_time(schema: str, reason: str) -> None:
    for index in (0, 1):
        tools = [Tool(f"t{n}", "", "{}") for n in range(index)] + [Tool("bad", "", schema)]
        with pytest.raises(InvalidArgument) as refused:
            validation.check_tools(tools, LIMITS)
        assert refused.value.field == f"tools[{index}].parameters_json"
        assert reason in str(refused.value)


def test_a_schema_valid_under_one_depth_limit_is_checked_again_under_another() -> None:
    validation.check_tools((Tool("t", "", NESTED),), LIMITS)
    with pytest.raises(InvalidArgument) as refused:
        validation.check_tools((Tool("t", "", NESTED),), Limits(max_json_depth=3))
    assert refused.value.metadata["max_json_depth"] == "3"
