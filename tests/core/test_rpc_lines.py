"""`core.rpc_lines.BoundedLines`: what a stdio JSON-RPC server's SDK is handed of each line."""

from __future__ import annotations

import io
import json

import pytest

from kernel_atlas.core.rpc_lines import BoundedLines, request_id


def _screen(text: str) -> str:
    value = json.loads(text)  # a refusal: ValueError (not JSON) or the one below
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return text.replace("secret", "<redacted>")


def _lines(data: bytes, limit: int = 64) -> tuple[list[str], list[str]]:
    warned: list[str] = []
    reader = BoundedLines(io.BufferedReader(io.BytesIO(data), 16), _screen, limit=limit, warn=warned.append)
    lines = []
    while line := reader.readline():
        lines.append(line)
    return lines, warned


def test_lines_within_the_limit_that_the_screen_accepts_pass_as_it_returns_them() -> None:
    data = b'{"id": 1}\n\n  \n{"id": 2, "method": "secret"}\n{"id": 3}'  # blank lines skipped, no final newline
    assert _lines(data) == (['{"id": 1}\n', '{"id": 2, "method": "<redacted>"}\n', '{"id": 3}'], [])


def test_a_long_line_is_skipped_in_chunks_and_its_request_answered() -> None:
    """A line of 70 + 2,000,000 bytes against a limit of 64: read past, never held whole; the
    request id 7 is answered with a request for a method naming the refusal."""
    long_line = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "' + b"a" * 2_000_000 + b'"}\n'
    lines, warned = _lines(long_line + b'{"id": 8}\n')
    assert [json.loads(line) for line in lines] == [
        {"jsonrpc": "2.0", "id": 7, "method": f"refused: a message of {len(long_line) - 1:,} bytes (over 64)"},
        {"id": 8},
    ]
    assert warned == []


def test_a_refused_line_without_an_id_is_said_on_stderr() -> None:
    lines, warned = _lines(b'{not json\n[1, 2]\n{"id": 9}\n')
    assert lines == ['{"id": 9}\n']
    assert len(warned) == 2 and all(
        w.startswith("atlas mcp: refused a message that is no JSON-RPC message (") for w in warned
    )
    assert (
        warned[1]
        == "atlas mcp: refused a message that is no JSON-RPC message (not an object); it names no request id to answer"
    )


def test_a_line_exactly_at_the_limit_passes() -> None:
    line = b'{"id": 1, "p": "' + b"x" * (64 - 18) + b'"}'
    assert len(line) == 64
    assert _lines(line + b"\n")[0] == [line.decode() + "\n"]


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
