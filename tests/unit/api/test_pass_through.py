"""A mutation's response bytes pass through the edge (issue 12 item 3): the servicer returns
what the use case encoded, gRPC sends it unchanged, and telemetry reads a summary built from the
typed result."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest
from admission_service.api import convert
from admission_service.api.servicer import SERVICE, AdmissionServicer, add_to_server
from admission_service.api.streaming import (
    CHUNK_BYTES,
    StreamingBudget,
    StreamSender,
)
from admission_service.app import commands as app
from admission_service.app.unit_of_work import Reply
from admission_service.domain.messages import Message, Role, Text
from admission_service.storage import codec
from promptadmission.v1 import admission_service_pb2 as api

from tests.unit.api.test_convert import _attempt_result
from tests.unit.api.test_streaming import Caller

STREAMS = StreamSender(StreamingBudget(1 << 30), 30.0)


def _spliced() -> app.AttemptResult:
    result = _attempt_result()
    frames = b"".join(codec.frame(Message(Role.USER, (Text(t),))) for t in ("a", "b\x00🙂"))
    request = result.request
    spliced = app.DerivedRequestView(
        request.wire_format, app.EncodedMessages(frames), request.body, request.tools
    )
    return app.AttemptResult(**{**_fields(result), "request": spliced})


def _fields(result: app.AttemptResult) -> dict[str, Any]:
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


class _Server:
    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.handlers.update(handlers)


def test_a_mutation_is_registered_to_send_its_bytes_unchanged() -> None:
    server = _Server()
    add_to_server(AdmissionServicer(None, None, STREAMS), server)  # type: ignore[arg-type]
    assert set(server.handlers) == {method.name for method in SERVICE.methods}
    data = convert.encode_admit(_spliced())
    sent = server.handlers["Admit"].response_serializer(convert.EncodedResponse("Admit", data))
    assert sent is data
    get = server.handlers["GetSession"].response_serializer(api.GetSessionResponse())
    assert get == b""


def test_the_reply_of_a_use_case_is_sent_as_it_stored_it() -> None:
    result = _spliced()
    stored = convert.encode_admit(result)
    assert convert.encoded_response("Admit", Reply(result, stored)).data is stored
    # validate_only stores nothing: the edge encodes the result, the same bytes
    assert convert.encoded_response("Admit", Reply(result)).data == stored


def test_telemetry_reads_a_summary_built_from_the_result() -> None:
    result = _spliced()
    response = convert.encoded_response("Admit", Reply(result, convert.encode_admit(result)))
    whole = response.message()
    assert isinstance(whole, api.AdmitResponse)
    assert whole == convert.admit_response(result)
    assert [m.content[0].text.text for m in whole.request.messages] == ["a", "b\x00🙂"]
    summary = response.summary()
    assert isinstance(summary, api.AdmitResponse)
    assert not summary.request.messages and not summary.request.body_json
    assert whole.request.body_json  # the summary leaves out what the response splices in
    whole.request.ClearField("messages")
    whole.request.ClearField("body_json")
    # and the tools, the header's and the request's (a tool set can be megabytes; telemetry
    # reads neither)
    assert [tool.name for tool in whole.header.header.tools] == ["t"]
    assert [tool.name for tool in whole.request.tools] == ["t"]
    assert not summary.header.header.tools and summary.header.reason == whole.header.reason
    assert not summary.request.tools
    whole.header.header.ClearField("tools")
    whole.request.ClearField("tools")
    assert summary == whole
    replayed = convert.encoded_response("Admit", Reply(None, response.data))
    assert replayed.summary() == response.message()  # no result: parsed from the bytes
    assert "data" not in repr(response)  # a log line never carries the payload by accident


def test_each_mutation_names_its_response_type() -> None:
    for method, write in convert.WRITES.items():
        assert write.message.DESCRIPTOR is SERVICE.methods_by_name[method].output_type


@pytest.mark.parametrize("sha256_last", [False, True])
@pytest.mark.parametrize(
    "size", [1, 300, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 5]
)
async def test_a_streamed_response_is_sent_as_the_chunk_messages_encoded(
    size: int, sha256_last: bool
) -> None:
    """StreamAdmit's and StreamReconcile's chunks are written encoded, through a pass-through
    serializer: each is byte for byte what protobuf encodes for the chunk message, at most
    CHUNK_BYTES of data, the first with the size of the whole and the first or (asked for) the
    last with its SHA-256."""
    server = _Server()
    add_to_server(AdmissionServicer(None, None, STREAMS), server)  # type: ignore[arg-type]
    data = random.Random(size).randbytes(size)
    caller = Caller(reads=len(data))  # reads every chunk
    await STREAMS.send(caller, data, sha256_last)  # type: ignore[arg-type]
    chunks = caller.written
    sha256 = hashlib.sha256(data).digest()
    assert len(chunks) == -(-size // CHUNK_BYTES)
    offsets = range(0, size, CHUNK_BYTES)
    for message_type, method in (
        (api.StreamAdmitResponse, "StreamAdmit"),
        (api.StreamReconcileResponse, "StreamReconcile"),
    ):
        serialize = server.handlers[method].response_serializer
        assert all(serialize(chunk) is chunk for chunk in chunks)
        messages = [message_type.FromString(chunk) for chunk in chunks]
        carrier = offsets[-1] if sha256_last else 0
        expected = [
            message_type(
                data=data[offset : offset + CHUNK_BYTES],
                total_bytes=size if offset == 0 else 0,
                sha256=sha256 if offset == carrier else b"",
            )
            for offset in offsets
        ]
        assert messages == expected
        assert chunks == [m.SerializeToString(deterministic=True) for m in expected]
