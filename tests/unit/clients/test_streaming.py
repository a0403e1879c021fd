"""The Python client's reassembly of a streamed response (``promptadmission.streaming``): the
chunks' bytes, checked against the size and SHA-256 the first one announces."""

from __future__ import annotations

import hashlib

import pytest
from promptadmission import StreamedResponseError, reassemble
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb


def chunks_of(data: bytes, size: int) -> list[api.StreamAdmitResponse]:
    pieces = [data[offset : offset + size] for offset in range(0, len(data), size)]
    first = api.StreamAdmitResponse(
        data=pieces[0], total_bytes=len(data), sha256=hashlib.sha256(data).digest()
    )
    return [first, *(api.StreamAdmitResponse(data=piece) for piece in pieces[1:])]


RESPONSE = api.AdmitResponse(
    admission_id="a",
    revision=3,
    request=pb.DerivedRequest(body_json='{"messages":[]}' + " " * 5000, total_messages=2),
)


def test_the_chunks_make_the_response() -> None:
    data = RESPONSE.SerializeToString()
    assert reassemble(chunks_of(data, 1000), api.AdmitResponse) == RESPONSE
    assert reassemble(chunks_of(data, len(data)), api.AdmitResponse) == RESPONSE


def test_a_missing_chunk_or_a_changed_byte_is_refused() -> None:
    chunks = chunks_of(RESPONSE.SerializeToString(), 1000)
    with pytest.raises(StreamedResponseError, match="received"):
        reassemble(chunks[:-1], api.AdmitResponse)
    changed = [*chunks[:-1], api.StreamAdmitResponse(data=b"x" * len(chunks[-1].data))]
    with pytest.raises(StreamedResponseError, match="SHA-256"):
        reassemble(changed, api.AdmitResponse)
    with pytest.raises(StreamedResponseError, match="before its first chunk"):
        reassemble([], api.AdmitResponse)
