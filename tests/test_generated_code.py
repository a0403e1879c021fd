"""The checked-in Python code generated from proto/ is current, complete and documented."""

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from promptadmission.v1 import admission_service_pb2, admission_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
PACKAGE = Path("promptadmission/v1")
CHECKED_IN = ROOT / "clients/python/src" / PACKAGE
TS_CHECKED_IN = ROOT / "clients/typescript/src/gen"
PROTOC_GEN_ES = ROOT / "clients/typescript/node_modules/.bin/protoc-gen-es"

RPCS = {
    "CreateSession",
    "GetSession",
    "ListSessions",
    "DeleteSession",
    "Admit",
    "Reconcile",
    "Record",
    "PlanCompaction",
    "Compact",
    "Inspect",
    "ListEvents",
    "ListTrajectory",
    "StreamAdmit",
    "StreamReconcile",
}
# The RPCs whose response is a stream of chunks (responses of any size).
STREAMED_RPCS = {"StreamAdmit", "StreamReconcile"}


def _read_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}


def test_checked_in_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(
        [str(ROOT / "scripts/generate.sh"), str(tmp_path)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    fresh = _read_files(tmp_path / PACKAGE)
    checked_in = _read_files(CHECKED_IN)

    assert fresh, "generation produced no files"
    problems = {
        "missing": sorted(fresh.keys() - checked_in.keys()),
        "extra": sorted(checked_in.keys() - fresh.keys()),
        "stale": sorted(
            name for name in fresh.keys() & checked_in.keys() if fresh[name] != checked_in[name]
        ),
    }
    assert problems == {"missing": [], "extra": [], "stale": []}, (
        f"{CHECKED_IN.relative_to(ROOT)} is out of date; run `make generate` and commit the result"
    )


def _read_tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_checked_in_typescript_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    if not PROTOC_GEN_ES.exists():
        reason = "protoc-gen-es is not installed (run `make ts-install`)"
        if os.environ.get("PAS_REQUIRE_TYPESCRIPT") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    subprocess.run(
        [str(ROOT / "scripts/generate-ts.sh"), str(tmp_path / "gen")],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    fresh = _read_tree(tmp_path / "gen")
    checked_in = _read_tree(TS_CHECKED_IN)

    assert "promptadmission/v1/admission_service_pb.ts" in fresh
    assert "google/rpc/error_details_pb.ts" in fresh
    problems = {
        "missing": sorted(fresh.keys() - checked_in.keys()),
        "extra": sorted(checked_in.keys() - fresh.keys()),
        "stale": sorted(
            name for name in fresh.keys() & checked_in.keys() if fresh[name] != checked_in[name]
        ),
    }
    assert problems == {"missing": [], "extra": [], "stale": []}, (
        f"{TS_CHECKED_IN.relative_to(ROOT)} is out of date; run `make generate` and commit the "
        "result"
    )


def test_the_service_exposes_every_rpc_with_its_own_request_and_response() -> None:
    service = admission_service_pb2.DESCRIPTOR.services_by_name["AdmissionService"]

    assert service.full_name == "promptadmission.v1.AdmissionService"
    assert {method.name for method in service.methods} == RPCS
    for method in service.methods:
        assert method.input_type.full_name == f"promptadmission.v1.{method.name}Request"
        assert method.output_type.full_name == f"promptadmission.v1.{method.name}Response"
        assert not method.client_streaming
        assert method.server_streaming is (method.name in STREAMED_RPCS)
        assert callable(getattr(admission_service_pb2_grpc.AdmissionServiceServicer, method.name))
    assert callable(admission_service_pb2_grpc.add_AdmissionServiceServicer_to_server)


def _message_elements(
    path: tuple[int, ...], message: descriptor_pb2.DescriptorProto
) -> Iterator[tuple[tuple[int, ...], str]]:
    # Paths follow descriptor.proto's field numbers: DescriptorProto.field = 2,
    # nested_type = 3, enum_type = 4, oneof_decl = 8.
    yield path, message.name
    for index, field in enumerate(message.field):
        yield (*path, 2, index), field.name
    synthetic = {field.oneof_index for field in message.field if field.proto3_optional}
    for index, oneof in enumerate(message.oneof_decl):
        if index not in synthetic:
            yield (*path, 8, index), oneof.name
    for index, nested in enumerate(message.nested_type):
        if nested.options.map_entry:  # the compiler's entry type of a map field: no source
            continue
        yield from _message_elements((*path, 3, index), nested)
    for index, enum in enumerate(message.enum_type):
        yield from _enum_elements((*path, 4, index), enum)


def _enum_elements(
    path: tuple[int, ...], enum: descriptor_pb2.EnumDescriptorProto
) -> Iterator[tuple[tuple[int, ...], str]]:
    yield path, enum.name
    for index, value in enumerate(enum.value):
        yield (*path, 2, index), value.name


def _file_elements(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[tuple[int, ...], str]]:
    # FileDescriptorProto.message_type = 4, enum_type = 5, service = 6;
    # ServiceDescriptorProto.method = 2.
    for index, message in enumerate(file.message_type):
        yield from _message_elements((4, index), message)
    for index, enum in enumerate(file.enum_type):
        yield from _enum_elements((5, index), enum)
    for index, service in enumerate(file.service):
        yield (6, index), service.name
        for method_index, method in enumerate(service.method):
            yield (6, index, 2, method_index), method.name


def test_every_proto_element_has_a_comment_starting_with_its_name(tmp_path: Path) -> None:
    protos = sorted(str(path.relative_to(PROTO_ROOT)) for path in PROTO_ROOT.rglob("*.proto"))
    descriptor_set = tmp_path / "descriptors.binpb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO_ROOT}",
            "--include_source_info",
            f"--descriptor_set_out={descriptor_set}",
            *protos,
        ],
        check=True,
        capture_output=True,
    )
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file

    undocumented = []
    for file in files:
        comments = {
            tuple(location.path): location.leading_comments.strip()
            for location in file.source_code_info.location
        }
        for path, name in _file_elements(file):
            if not re.match(rf"{name}\b", comments.get(path, "")):
                undocumented.append(f"{file.name}: {name}")
    assert len(files) == len(protos)
    assert undocumented == []
