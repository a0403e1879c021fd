"""Workers forked from a ``serve`` parent that loaded the tokenizers (``PAS_TOKENIZER_PRELOAD``,
api/workers.py) price with the parent's tokenizer instead of loading their own. The families and
the setting on their own: ``tests/unit/test_tokenizers_preload.py``."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import grpc
import pytest
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from tests.api.serve_process import serving

LOADED = re.compile(r"tokenizer (\S+) for (\S+) loaded")


@pytest.mark.slow
def test_forked_workers_use_the_tokenizer_the_parent_loaded(
    database_url: str, tmp_path: Path
) -> None:
    """``serve`` with two workers loads the catalog's tokenizer once, in the parent, and both
    workers price with it without loading it again."""
    names = set()
    with serving(
        database_url,
        tmp_path,
        PAS_WORKERS="2",
        PAS_LOG_FORMAT="text",
        PAS_MIGRATE_ON_START="false",
        PAS_TOKENIZER_PRELOAD=None,
    ) as served:
        for _ in range(6):  # own connections: the kernel spreads them over both workers
            options = [("grpc.use_local_subchannel_pool", 1)]
            with grpc.insecure_channel(served.target, options=options) as channel:
                stub = api_grpc.AdmissionServiceStub(channel)
                session_id = f"preload-{uuid.uuid4().hex}"
                stub.CreateSession(api.CreateSessionRequest(session_id=session_id))
                route = pb.Route(provider="deepseek", model="deepseek-flash", context_window=64_000)
                admit = api.AdmitRequest(
                    session_id=session_id, turn=1, rendered_prompt="You are terse.", route=route
                )
                stub.Admit(admit, timeout=30)
                inspected = stub.Inspect(api.InspectRequest(session_id=session_id))
                names.add(inspected.breakdown.tokenizer)
        served.process.terminate()
        served.process.wait(timeout=30)
    text = served.log.read_text()
    assert names == {"deepseek-v4"}
    assert LOADED.findall(text) == [("deepseek-v4", "deepseek")], text  # once: the parent
    assert "Traceback" not in text
