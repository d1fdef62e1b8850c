"""Superseded progress coalesced for a slow consumer (``transport.coalescing``), on bytes, without Twisted: the
newest progress of a token replaces the held one at its own place, everything else keeps its order, and what is
released is what the client would have read, framed as HTTP/1.1 chunks. The wire test (a real daphne, a slow
reader) is ``tests/e2e/test_bounded_memory.py::test_a_slow_consumer_gets_the_latest_progress_and_the_answer``."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from mcp_app.transport.coalescing import Backlog, frame, progress_key, sse_events


def progress(token: object, step: int) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": step},
    }
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"


def answer(call_id: int) -> bytes:
    return b"event: message\ndata: " + orjson.dumps({"jsonrpc": "2.0", "id": call_id, "result": {}}) + b"\n\n"


def unchunked(parts: list[bytes]) -> bytes:
    """The data of HTTP/1.1 chunks written back to back."""
    raw, data = b"".join(parts), b""
    while raw:
        size, _, raw = raw.partition(b"\r\n")
        data, raw = data + raw[: int(size, 16)], raw[int(size, 16) + 2 :]
    return data


def test_the_newest_progress_of_a_token_takes_the_place_of_the_held_one() -> None:
    backlog = Backlog()
    backlog.hold(progress("a", 1) + progress("b", 1), True)
    backlog.hold(answer(7) + progress("a", 2), True)
    backlog.hold(b": keep-alive\n\n", True)

    assert backlog.size == sum(map(len, (progress("b", 1), answer(7), progress("a", 2), b": keep-alive\n\n")))
    released = backlog.release()
    assert unchunked(released) == progress("b", 1) + answer(7) + progress("a", 2) + b": keep-alive\n\n"
    assert len(released) == 3  # one chunk
    assert not backlog and backlog.size == 0 and backlog.release() == []


def test_bytes_that_are_not_chunk_data_keep_their_place_between_chunks() -> None:
    backlog = Backlog()
    backlog.hold(progress(1, 1), True)
    backlog.hold(b"HTTP/1.1 200 OK\r\n\r\n", False)
    backlog.hold(progress(1, 2), True)

    first, second = frame([(progress(1, 1), True)]), frame([(progress(1, 2), True)])
    assert backlog.release() == [b"HTTP/1.1 200 OK\r\n\r\n", *second]  # the first progress superseded
    assert first != second


def test_progress_keys() -> None:
    assert progress_key(progress("a", 1)) == b'"a"'
    assert progress_key(progress(3, 1)) == b"3"
    assert progress_key(answer(1)) is None
    assert progress_key(progress("a", 1)[:-1]) is None  # not a whole event
    assert progress_key(b'data: {"method":"notifications/progress", broken\n\n') is None


events = st.one_of(
    st.builds(progress, st.sampled_from(["a", "b", 1]), st.integers(0, 9)),
    st.builds(answer, st.integers(0, 9)),
    st.just(b": keep-alive\n\n"),
)
writes = st.lists(
    st.one_of(
        st.tuples(st.lists(events, min_size=1, max_size=4).map(b"".join), st.just(True)),
        st.tuples(st.binary(min_size=1, max_size=8), st.just(False)),
    ),
    max_size=12,
)


@given(writes)
def test_release_is_every_write_in_order_less_the_superseded_progress(held: list[tuple[bytes, bool]]) -> None:
    backlog = Backlog()
    for data, chunk in held:
        backlog.hold(data, chunk)

    pieces = [
        (piece, chunk) for data, chunk in held for piece in (sse_events(data) if chunk else [data])
    ]  # every event its own piece
    keys = [progress_key(piece) if chunk else None for piece, chunk in pieces]
    kept = [piece for index, piece in enumerate(pieces) if keys[index] is None or keys[index] not in keys[index + 1 :]]
    assert backlog.size == sum(len(piece) for piece, _chunk in kept)
    assert backlog.release() == frame(kept)


@given(st.binary(max_size=64))
def test_sse_events_join_to_the_body(body: bytes) -> None:
    assert b"".join(sse_events(body)) == body


@given(st.lists(st.binary(min_size=1, max_size=32), max_size=6))
def test_a_run_of_chunk_data_is_one_chunk(data: list[bytes]) -> None:
    parts = frame([(piece, True) for piece in data])
    assert unchunked(parts) == b"".join(data)
    assert len(parts) == (3 if data else 0)
