"""A worked session through the Prompt Admission Service (the README's example).

Run it against a running service (``make run`` in another terminal):

    .venv/bin/python examples/walkthrough.py [--target 127.0.0.1:50051]

It shows the three moves the service exists for: an in-history append (the prompt changes and
the cached history stays untouched), a series-start consolidation (a declared series start
folds the prompt back into the head), and a compaction that keeps the prompt in force.
"""

from __future__ import annotations

import argparse
import uuid

import grpc
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

IN_HISTORY = pb.Route(provider="deepseek", model="deepseek-flash", context_window=128_000)


def user(text: str) -> pb.Message:
    return pb.Message(
        role=pb.MESSAGE_ROLE_USER, content=[pb.ContentBlock(text=pb.TextBlock(text=text))]
    )


def show(title: str, request: pb.DerivedRequest) -> None:
    print(f"\n## {title}")
    for index, message in enumerate(request.messages):
        role = pb.MessageRole.Name(message.role).removeprefix("MESSAGE_ROLE_").lower()
        text = " ".join(block.text.text for block in message.content if block.HasField("text"))
        flat = text.replace("\n", " ")
        print(f"  [{index}] {role:9} {flat[:70]}")


def run(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = api_grpc.AdmissionServiceStub(channel)
        session = stub.CreateSession(
            api.CreateSessionRequest(session_id=f"walkthrough-{uuid.uuid4().hex[:8]}")
        ).session

        def admit(
            prompt: str, text: str, step: int, *, starts_series: bool = False
        ) -> api.AdmitResponse:
            return stub.Admit(
                api.AdmitRequest(
                    session_id=session.session_id,
                    request_id=str(uuid.uuid4()),
                    turn=1,
                    step=step,
                    rendered_prompt=prompt,
                    route=IN_HISTORY,
                    users=[user(text)],
                    starts_request_series=starts_series,
                )
            )

        def reply(admission_id: str, text: str) -> None:
            stub.Record(
                api.RecordRequest(
                    session_id=session.session_id,
                    admission_id=admission_id,
                    assistant=pb.Message(
                        role=pb.MESSAGE_ROLE_ASSISTANT,
                        content=[pb.ContentBlock(text=pb.TextBlock(text=text))],
                    ),
                    usage=pb.Usage(input_tokens=40, output_tokens=12),
                )
            )

        first = admit("You are a careful coding agent.", "Read main.py and explain it.", 1)
        reply(first.admission_id, "main.py starts the server and waits for SIGTERM. " * 4)
        show("1. first step: the head is reserved, then the user", first.request)

        # The prompt changes (plan mode enters). On an in-history route it is appended after
        # the cached history: messages 0..2 stay byte-identical, so the cache stays warm.
        second = admit(
            "You are a careful coding agent.\nPLAN MODE: propose, do not edit.",
            "Plan the refactor.",
            2,
        )
        reply(second.admission_id, "1. extract config 2. add tests 3. split the module. " * 4)
        show(
            "2. in-history append (forecast: "
            f"{second.forecast.reused_messages} of {second.forecast.total_messages} messages "
            "reused)",
            second.request,
        )

        # The harness declares a new request series: the prompt is folded into the head and
        # the appended copy is emptied (it derives to nothing).
        third = admit(
            "You are a careful coding agent.\nPLAN MODE: propose, do not edit.",
            "Go ahead.",
            3,
            starts_series=True,
        )
        reply(third.admission_id, "Done: config extracted, tests added. " * 4)
        show("3. series start: consolidated into the head", third.request)

        # Compaction folds everything after the head into a summary; the prompt in force is
        # kept (it was already in the head here, so no extra system commit is needed).
        plan = stub.PlanCompaction(
            api.PlanCompactionRequest(session_id=session.session_id, retain_tokens=0)
        )
        stub.Compact(
            api.CompactRequest(
                session_id=session.session_id,
                request_id=str(uuid.uuid4()),
                plan_token=plan.plan_token,
                summary="The user asked to read main.py, planned a refactor and approved it.",
            )
        )
        fourth = admit(
            "You are a careful coding agent.\nPLAN MODE: propose, do not edit.", "What is left?", 4
        )
        show("4. after compaction: a new series over the summary", fourth.request)

        inspected = stub.Inspect(api.InspectRequest(session_id=session.session_id))
        print(
            f"\neffective prompt (seq {inspected.effective_prompt.seq}, "
            f"{pb.PromptLocation.Name(inspected.effective_prompt.location)}):"
        )
        print("  " + inspected.effective_prompt.text.replace("\n", "\n  "))
        b = inspected.breakdown
        print(
            f"tokens: system {b.system_tokens}, tools {b.tools_tokens}, "
            f"messages {b.message_tokens}, total {b.total_tokens} (tokenizer {b.tokenizer})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    run(parser.parse_args().target)


if __name__ == "__main__":
    main()
