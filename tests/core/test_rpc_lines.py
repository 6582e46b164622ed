"""`core.rpc_lines`: what a stdio JSON-RPC server's SDK is handed of each line, and how a line it
is not handed is answered."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from kernel_atlas.core.rpc_lines import INVALID_REQUEST, PARSE_ERROR, BoundedLines, Refused, Wire, request_id


def _screen(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        raise Refused(PARSE_ERROR, "not JSON") from None
    if not isinstance(value, dict):
        raise Refused(INVALID_REQUEST, "not an object")
    return text.replace("secret", "<redacted>")


def _lines(data: bytes, limit: int = 64) -> tuple[list[str], list[dict[str, Any]]]:
    answers: list[dict[str, Any]] = []
    reader = BoundedLines(io.BufferedReader(io.BytesIO(data), 16), _screen, answers.append, limit=limit)
    lines = []
    while line := reader.readline():
        lines.append(line)
    return lines, answers


def test_lines_within_the_limit_that_the_screen_accepts_pass_as_it_returns_them() -> None:
    data = b'{"id": 1}\n\n  \n{"id": 2, "method": "secret"}\n{"id": 3}'  # blank lines skipped, no final newline
    assert _lines(data) == (['{"id": 1}\n', '{"id": 2, "method": "<redacted>"}\n', '{"id": 3}'], [])


def test_a_long_line_is_skipped_in_chunks_and_answered_by_its_id() -> None:
    """A line of 70 + 2,000,000 bytes against a limit of 64: read past, never held whole; request
    7 is answered as an invalid request, and the next line is handed on."""
    long_line = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "' + b"a" * 2_000_000 + b'"}\n'
    lines, answers = _lines(long_line + b'{"id": 8}\n')
    assert lines == ['{"id": 8}\n']
    error = {"code": -32600, "message": f"Invalid Request: a message of {len(long_line) - 1:,} bytes (over 64)"}
    assert answers == [{"jsonrpc": "2.0", "id": 7, "error": error}]


def test_refused_lines_are_answered_with_their_id_or_a_null_one() -> None:
    lines, answers = _lines(b'{not json\n[1, 2]\n{"id": "q", "x": [}\n{"id": 9}\n')
    assert lines == ['{"id": 9}\n']
    assert answers == [
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: not JSON"}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request: not an object"}},
        {"jsonrpc": "2.0", "id": "q", "error": {"code": -32700, "message": "Parse error: not JSON"}},
    ]


def test_a_line_exactly_at_the_limit_passes() -> None:
    line = b'{"id": 1, "p": "' + b"x" * (64 - 18) + b'"}'
    assert len(line) == 64
    assert _lines(line + b"\n")[0] == [line.decode() + "\n"]


def test_the_wire_writes_whole_lines() -> None:
    raw = io.BytesIO()
    wire = Wire(raw)  # type: ignore[arg-type]
    wire.write('{"id": 1}\n')
    wire.flush()
    wire.answer({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: x"}})
    assert raw.getvalue().decode().splitlines() == [
        '{"id": 1}',
        '{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error: x"}}',
    ]


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":12,"method":"m","params":{', 12),
        (b'{"jsonrpc":"2.0","id":"abc-1","method":', "abc-1"),
        (b'{"jsonrpc":"2.0","method":"m","params":{"id":5', None),  # an id inside the params is not the request's
        (b'{"jsonrpc":"2.0","id":{"x":1}}', None),
        (b'{"jsonrpc":"2.0","id":1234567890123456789012}', None),  # beyond 18 digits: no id
        (b"\xff\xfe garbage", None),
    ],
)
def test_request_id_is_read_before_the_params_only(head: bytes, expected: object) -> None:
    assert request_id(head) == expected
