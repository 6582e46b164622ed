"""The lines a stdio JSON-RPC server (`atlas mcp`) reads, bounded before its SDK parses them, and
the wire it answers on.

The MCP SDK reads each line whole and parses it; a message it cannot parse is dropped without an
answer. So a 100 MB line held 2.6 GB and ran past two minutes, and a request nested 100,000 deep
(or not JSON at all) left its client waiting for an answer that never came. Here a line longer
than `MAX_MESSAGE_BYTES` is read to its end in chunks and never held, and a line the server's
own screen refuses is not handed on (one it accepts is handed on as the screen returns it).
Each refused line is answered on the wire, as JSON-RPC 2.0 says: a parse error (-32700) or an
invalid request (-32600), with the request's id where the line shows it, else a null id.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

MAX_MESSAGE_BYTES = 4 << 20  # an agent's largest message is a query of a few KB
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_HEAD_BYTES = 4096  # where a refused line's request id is looked for
_CHUNK = 1 << 20
# the request id, before any "params" (clients write jsonrpc, id, method, then params)
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}(?=\s*[,}])|"(?:[^"\\\r\n]|\\.){0,256}")')
_PARAMS = re.compile(rb'"params"\s*:')


_FROM_LINE = object()  # a refusal's request id: looked for in the line itself


class Refused(Exception):
    """A screen's refusal of a line: its JSON-RPC error code, what it says and, where the screen
    read the request, its id (else it is looked for in the line)."""

    def __init__(self, code: int, message: str, request: Any = _FROM_LINE) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request = request


def request_id(head: bytes) -> int | str | None:
    """The id of the request whose text starts with `head`, where it shows before the params."""
    found = _ID.search(head)
    params = _PARAMS.search(head)
    if found is None or (params is not None and params.start() < found.start()):
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) else None


class Wire:
    """The server's output: a text file for the SDK's writer (each of its writes is one whole
    message line) that refusals are answered on too, a whole line at a time under one lock."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._raw.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._raw.flush()

    def answer(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._raw.write(json.dumps(message).encode("utf-8") + b"\n")
            self._raw.flush()

    def close(self) -> None:
        """The descriptor is the server's; it is not closed here."""


class BoundedLines:
    """A text reader of `raw`'s lines (as `anyio.wrap_file` iterates one: `readline` until "")
    that hands on only lines of at most `limit` bytes that `screen` accepts, as it returns them
    (it raises `Refused` on a line it refuses); every refused line is answered through `answer`."""

    def __init__(
        self,
        raw: BinaryIO,
        screen: Callable[[str], str],
        answer: Callable[[dict[str, Any]], None],
        limit: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._raw = raw
        self._screen = screen
        self._answer = answer
        self._limit = limit

    def readline(self, size: int = -1) -> str:
        while True:
            line = self._raw.readline(self._limit + 1)
            if not line:
                return ""
            if len(line) > self._limit and not line.endswith(b"\n"):
                skipped = len(line) + self._skip_line()
                self._refuse(line, INVALID_REQUEST, f"a message of {skipped:,} bytes (over {self._limit:,})")
                continue
            text = line.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            try:
                return self._screen(text)
            except Refused as refused:
                self._refuse(line, refused.code, refused.message, refused.request)

    def _skip_line(self) -> int:
        """Read past the rest of the current line; its bytes skipped (its newline not counted)."""
        skipped = 0
        while True:
            chunk = self._raw.readline(_CHUNK)
            skipped += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                return skipped - chunk.endswith(b"\n")

    def _refuse(self, line: bytes, code: int, what: str, request: Any = _FROM_LINE) -> None:
        message = {PARSE_ERROR: "Parse error", INVALID_PARAMS: "Invalid params"}.get(code, "Invalid Request")
        error = {"code": code, "message": f"{message}: {what}"}
        known = request if request is not _FROM_LINE else request_id(line[:_HEAD_BYTES])
        self._answer({"jsonrpc": "2.0", "id": known, "error": error})

    def close(self) -> None:
        """The descriptor is the server's; it is not closed here."""
