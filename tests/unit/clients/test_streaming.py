"""The Python client's reassembly of a streamed response (``promptadmission.streaming``): the
chunks' bytes, checked against the size the first one announces and the SHA-256 the first or
the last carries."""

from __future__ import annotations

import hashlib

import pytest
from promptadmission import StreamedResponseError, reassemble
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb


def chunks_of(
    data: bytes, size: int, *, sha256_last: bool = False
) -> list[api.StreamAdmitResponse]:
    pieces = [data[offset : offset + size] for offset in range(0, len(data), size)]
    chunks = [api.StreamAdmitResponse(data=piece) for piece in pieces]
    chunks[0].total_bytes = len(data)
    chunks[-1 if sha256_last else 0].sha256 = hashlib.sha256(data).digest()
    return chunks


RESPONSE = api.AdmitResponse(
    admission_id="a",
    revision=3,
    request=pb.DerivedRequest(body_json='{"messages":[]}' + " " * 5000, total_messages=2),
)


@pytest.mark.parametrize("sha256_last", [False, True])
def test_the_chunks_make_the_response(sha256_last: bool) -> None:
    data = RESPONSE.SerializeToString()
    for size in (1000, len(data)):
        chunks = chunks_of(data, size, sha256_last=sha256_last)
        assert reassemble(chunks, api.AdmitResponse) == RESPONSE


def test_a_response_whose_chunks_carry_no_digest_or_two_is_refused() -> None:
    data = RESPONSE.SerializeToString()
    first, last = chunks_of(data, 1000), chunks_of(data, 1000, sha256_last=True)
    with pytest.raises(StreamedResponseError, match="0 chunks carried a SHA-256"):
        reassemble([last[0], *first[1:]], api.AdmitResponse)
    with pytest.raises(StreamedResponseError, match="2 chunks carried a SHA-256"):
        reassemble([first[0], *last[1:]], api.AdmitResponse)


def test_a_missing_chunk_or_a_changed_byte_is_refused() -> None:
    chunks = chunks_of(RESPONSE.SerializeToString(), 1000)
    with pytest.raises(StreamedResponseError, match="received"):
        reassemble(chunks[:-1], api.AdmitResponse)
    changed = [*chunks[:-1], api.StreamAdmitResponse(data=b"x" * len(chunks[-1].data))]
    with pytest.raises(StreamedResponseError, match="SHA-256"):
        reassemble(changed, api.AdmitResponse)
    with pytest.raises(StreamedResponseError, match="before its first chunk"):
        reassemble([], api.AdmitResponse)
