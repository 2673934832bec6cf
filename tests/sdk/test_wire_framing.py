"""Frame decoding rules: what counts as a request, a response, or a malformed frame."""

from __future__ import annotations

import json

import pytest

from langbot_sdk.wire.framing import (
    MalformedFrame,
    Request,
    Response,
    decode_frame,
    encode_frame,
    peek_oversize_head,
    request_frame,
    response_frame,
)


def test_encoded_frames_are_compact_utf8_json_that_decode_back():
    frame = request_frame(3, "history_page", {"run_id": "r", "text": "中文 ✓"})

    encoded = encode_frame(frame)

    assert b" " not in encoded.replace("中文 ✓".encode(), b"")
    assert json.loads(encoded) == frame
    assert decode_frame(encoded) == Request(3, "history_page", {"run_id": "r", "text": "中文 ✓"})


def test_a_response_frame_decodes_as_a_response():
    encoded = encode_frame(response_frame(9, {"i": 1}, chunk_status="continue"))

    assert decode_frame(encoded) == Response(9, 0, "", {"i": 1}, "continue")


@pytest.mark.parametrize(
    ("raw", "seq_id", "is_response"),
    [
        (b"\xff\xfe not utf8", None, False),
        (b"null", None, False),
        (b'{"seq_id": true, "action": "x", "data": {}}', None, False),
        (b'{"seq_id": 4, "action": "", "data": {}}', 4, False),
        (b'{"seq_id": 4, "action": "x", "data": []}', 4, False),
        (b'{"seq_id": 4, "action": "x"}', 4, False),
        (b'{"seq_id": 4, "code": 2, "data": {}, "chunk_status": "end"}', 4, True),
        (b'{"seq_id": 4, "code": 0, "data": {}, "chunk_status": "later"}', 4, True),
        (b'{"seq_id": "4", "code": 0, "data": {}, "chunk_status": "end"}', None, True),
    ],
)
def test_malformed_frames_keep_the_seq_id_only_when_it_is_a_real_integer(raw, seq_id, is_response):
    decoded = decode_frame(raw)

    assert isinstance(decoded, MalformedFrame)
    assert (decoded.seq_id, decoded.is_response) == (seq_id, is_response)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"seq_id":12,"action":"run_agent","data":{"x":"yyyy', (12, False)),
        (b'{"seq_id":12,"code":0,"message":"","data":{"blob":"yyyy', (12, True)),
        (b'{"action": "state_set", "seq_id": 5, "data": {"v": "', (5, False)),
        (b'{"data":{"seq_id":99,"action":"x"},"blob":"', (None, False)),
        (b"garbage", (None, False)),
    ],
)
def test_the_seq_id_of_an_oversize_frame_is_recovered_only_from_the_top_level(head, expected):
    assert peek_oversize_head(head) == expected
