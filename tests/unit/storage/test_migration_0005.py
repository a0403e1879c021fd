"""Migration 0005's conversions, for every message: the stored JSON of revision 0004 becomes
exactly the bytes storage now writes, and the downgrade gives back exactly that JSON."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from admission_service.domain.messages import Message
from admission_service.storage import codec
from admission_service.storage.engine import MIGRATIONS_DIR
from hypothesis import given
from promptadmission.v1 import session_pb2 as pb

from tests import stored_0004

from .test_codec import messages_0004


def _migration() -> ModuleType:
    path = MIGRATIONS_DIR / "versions" / "0005_one_message_encoding.py"
    spec = importlib.util.spec_from_file_location("migration_0005", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIGRATION = _migration()


@given(messages_0004)
def test_0004_json_converts_to_the_stored_encoding_and_back(message: Message) -> None:
    json_0004 = stored_0004.message_json(message)
    converted = MIGRATION._to_proto(json_0004).SerializeToString(deterministic=True)
    assert converted == codec.encode(message)
    back = MIGRATION._dumps(MIGRATION._from_proto(pb.Message.FromString(converted)))
    assert back == stored_0004.encode_message(message)
