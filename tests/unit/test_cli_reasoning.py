"""``admission-service inspect`` shows the reasoning blocks and what a format leaves out."""

from __future__ import annotations

from admission_service.cli import format_inspect
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb


def test_inspect_prints_reasoning_blocks_and_the_omitted() -> None:
    assistant = pb.Message(
        role=pb.MESSAGE_ROLE_ASSISTANT,
        content=[
            pb.ContentBlock(
                redacted_reasoning=pb.RedactedReasoningBlock(provider="anthropic", data="EmwK")
            ),
            pb.ContentBlock(reasoning_item=pb.ReasoningItemBlock(id="rs_1", summary=["plan"])),
        ],
    )
    omitted = pb.OmittedBlock(field="messages[0].content[1]", why="no place for it")
    response = api.InspectResponse(
        session=pb.Session(session_id="s"),
        effective_prompt=pb.EffectivePrompt(location=pb.PROMPT_LOCATION_NONE),
        request=pb.DerivedRequest(
            wire_format=pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
            messages=[assistant],
            body_json='{"messages":[]}',
            omitted=[omitted],
        ),
    )
    out = format_inspect(response)
    assert "[redacted reasoning anthropic] [reasoning item rs_1] plan" in out
    assert "anthropic_messages body leaves out:\n  messages[0].content[1]: no place for it" in out
