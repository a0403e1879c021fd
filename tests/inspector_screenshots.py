"""The inspector's screenshots in docs/: a worked session shown in a real browser.

    DATABASE_URL=... .venv/bin/python -m tests.inspector_screenshots [OUT_DIR]   # default docs/

Starts the service and the inspector in this process (the test database at DATABASE_URL,
already migrated, or the embedded PostgreSQL), drives one session on the in-history route — a
prompt, two in-history updates, a tool change with a new series, a compaction, usage recorded
for each request — and saves the Chat and Trajectory views of it through Debian's headless Chromium.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from admission_service.api.server import start_server
from admission_service.config import Settings
from admission_service.inspector.http import start_inspector
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb

from tests.api.support import IN_HISTORY_ROUTE, admit_request, connect, user
from tests.browser import chrome, full_page_screenshot, missing

READ = pb.Tool(name="read_file", parameters_json='{"type":"object"}')
EDIT = pb.Tool(name="edit_file", parameters_json='{"type":"object"}')
BASE = "You are a careful coding agent."
STEPS = [
    (BASE, "Read main.py and explain it.", [READ], {}),
    (f"{BASE}\nPLAN MODE: propose, do not edit.", "Plan the refactor.", [READ], {}),
    (
        f"{BASE}\nPLAN MODE: propose, do not edit.\nSkill: refactoring.",
        "Refine step 2.",
        [READ],
        {},
    ),
    (BASE, "Go ahead and edit.", [READ, EDIT], {"temperature": "0.2"}),
]


async def drive(settings: Settings, out: Path) -> list[Path]:
    server = await start_server(settings)
    client = connect(server)
    inspector = await start_inspector(settings, engine=server.engine)
    try:
        stub = client.stub
        session_id = f"walkthrough-{uuid.uuid4().hex[:6]}"
        await stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
        for step, (prompt, text, tools, config) in enumerate(STEPS, start=1):
            admitted = await stub.Admit(
                admit_request(
                    session_id, prompt, text, turn=1, step=step, tools=tools, config=config
                )
            )
            reply = f"Step {step} done: " + "the module is explained and planned. " * 3
            await stub.Record(
                api.RecordRequest(
                    session_id=session_id,
                    admission_id=admitted.admission_id,
                    assistant=pb.Message(
                        role=pb.MESSAGE_ROLE_ASSISTANT,
                        content=[pb.ContentBlock(text=pb.TextBlock(text=reply))],
                    ),
                    usage=pb.Usage(
                        input_tokens=admitted.forecast.total_tokens,
                        cache_read_tokens=admitted.forecast.reused_tokens * 9 // 10,
                    ),
                )
            )
        plan = await stub.PlanCompaction(
            api.PlanCompactionRequest(session_id=session_id, retain_tokens=0)
        )
        await stub.Compact(
            api.CompactRequest(
                session_id=session_id, plan_token=plan.plan_token, summary="Explained, planned."
            )
        )
        await stub.Admit(
            api.AdmitRequest(
                session_id=session_id,
                turn=2,
                step=1,
                rendered_prompt=BASE,
                route=IN_HISTORY_ROUTE,
                tools=[READ, EDIT],
                config={"temperature": "0.2"},
                users=[user("What is left?")],
            )
        )
        base = f"http://127.0.0.1:{inspector.port}/sessions/{session_id}"
        return await asyncio.to_thread(capture, base, out)
    finally:
        await inspector.stop()
        await client.close()


def capture(base: str, out: Path) -> list[Path]:
    driver = chrome()
    try:
        shots = []
        for view in ("trajectory", "chat"):
            driver.get(f"{base}/{view}")
            shots.append(full_page_screenshot(driver, out / f"inspector-{view}.png"))
        return shots
    finally:
        driver.quit()


def main() -> None:
    reason = missing()
    if reason is not None:
        raise SystemExit(reason)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "docs"
    settings = Settings.from_env()
    settings = Settings(
        listen="127.0.0.1:0",
        inspector_listen="127.0.0.1:0",
        database_url=settings.database_url,
        migrate_on_start=True,
    )
    for path in asyncio.run(drive(settings, out)):
        sys.stdout.write(f"wrote {path}\n")


if __name__ == "__main__":
    main()
