"""The bounds and versions of a worker's held frames (storage/held_frames.py), and the FULL
read's rows taking the frames a read left out from them (frame_chunks.full_frames)."""

from __future__ import annotations

from admission_service.storage.frame_chunks import full_frames
from admission_service.storage.held_frames import HELD_FRAME_MIN, NOT_HELD, HeldFrames

A, B, C = ("t", "a"), ("t", "b"), ("t", "c")


def frames(*sizes: int) -> dict[int, bytes]:
    return {seq: bytes([seq]) * size for seq, size in enumerate(sizes, start=1)}


def test_a_commit_holds_what_its_read_found_and_it_wrote_at_the_version_it_left() -> None:
    held = HeldFrames(1000)
    held.committed(A, 7, frames(100, 200), {9: b"w" * 30})
    assert held.get(A).row_version == 8 and set(held.get(A).parts) == {1, 2, 9}
    assert held.bytes == 330
    held.committed(A, 8, frames(50), {})  # a later read found only a node of 50 bytes
    assert set(held.get(A).parts) == {1} and held.bytes == 50


def test_a_commit_without_a_read_carries_frames_held_at_its_read_version_only() -> None:
    held = HeldFrames(1000)
    held.committed(A, 7, frames(100), {})
    held.committed(A, 8, None, {9: b"w" * 30})  # moved the row from the version they were at
    assert held.get(A).row_version == 9 and set(held.get(A).parts) == {1, 9}
    held.committed(A, 3, None, {10: b"x" * 20})  # another version: only what it wrote holds
    assert held.get(A).row_version == 4 and set(held.get(A).parts) == {10}
    held.committed(A, 2, None, {})
    assert held.get(A) is NOT_HELD and held.bytes == 0


def test_a_session_past_the_bound_keeps_its_smallest_frames_up_to_it() -> None:
    held = HeldFrames(1000)
    held.put(A, 1, frames(600, 300, 150))
    assert sorted(len(frame) for frame in held.get(A).parts.values()) == [150, 300]
    held.put(B, 1, frames(1200))  # alone past the bound: nothing held
    assert held.get(B) is NOT_HELD and len(held) == 1
    held.put(C, 1, frames(900))  # the bound's worth: the others go
    assert held.get(A) is NOT_HELD and held.bytes == 900


def test_the_least_recently_used_session_goes_first_past_the_bound() -> None:
    held = HeldFrames(1000)
    held.put(A, 1, frames(400))
    held.put(B, 1, frames(400))
    held.get(A)  # A is used: B is now the oldest
    held.put(C, 1, frames(400))
    assert held.get(B) is NOT_HELD and held.get(A) is not NOT_HELD and held.get(C) is not NOT_HELD
    assert held.bytes == 800
    held.evict(A)
    assert held.bytes == 400 and len(held) == 1


def test_full_frames_take_the_left_out_frames_from_those_held_and_hold_the_large() -> None:
    large, small = b"L" * HELD_FRAME_MIN, b"s" * 10
    chunk = b"C" * HELD_FRAME_MIN
    # (position, frames, messages, tokens, before, sealed end, key): chunks (key -1 - first
    # position), then nodes (key: seq).
    rows = [
        (0, b"chunk", 3, 30, True, 6, -1),
        (3, None, 3, 12, True, 6, -4),
        (6, None, 1, 5, True, 6, 40),
        (7, small, 1, 2, False, 6, 41),
        (8, large, 1, 9, False, 6, 42),
    ]
    found = full_frames(rows, {-4: chunk, 40: b"H" * HELD_FRAME_MIN})
    assert found.frames.parts == (b"chunk", chunk, b"H" * HELD_FRAME_MIN, small, large)
    assert (found.frames.messages, found.frames.tokens) == (9, 58)
    assert (found.frames.before_messages, found.frames.before_tokens) == (7, 47)
    assert (found.sealed_upto, found.read_end, found.from_held) == (6, 9, 2)
    assert set(found.to_hold) == {-4, 40, 42}  # the small chunk and the small node are not


def test_past_the_bound_the_oldest_session_lets_go_of_its_largest_frames_first() -> None:
    held = HeldFrames(1000)
    held.put(A, 4, frames(100, 300, 200))
    held.put(B, 1, frames(500))  # 1 100 held: A, the oldest, lets go of its 300 bytes
    assert held.get(A).row_version == 4
    assert sorted(len(frame) for frame in held.get(A).parts.values()) == [100, 200]
    assert held.get(A).size == 300 and held.bytes == 800
    held.put(C, 1, frames(450))  # B is the oldest now (A was used): it goes whole
    assert held.get(B) is NOT_HELD and held.bytes == 750
    held.put(B, 2, frames(60, 500))  # 1 310: A goes whole, then C's one part for the last 10
    assert held.get(A) is NOT_HELD and held.get(C) is NOT_HELD
    assert held.bytes == 560 and len(held) == 1


def test_a_trimmed_session_stays_the_least_recently_used() -> None:
    held = HeldFrames(1000)
    held.put(A, 1, frames(100, 300, 200))
    held.put(B, 1, frames(500))  # A lets go of its 300 bytes
    held.put(C, 1, frames(400))  # 1 200: A, still the oldest, lets go of 200 more; B keeps all
    assert [len(frame) for frame in held.get(A).parts.values()] == [100]
    assert held.get(B) is not NOT_HELD and held.bytes == 1000
