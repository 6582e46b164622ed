"""The lines a stdio JSON-RPC server (`atlas mcp`) reads, bounded before its SDK parses them.

The MCP SDK reads each line whole and parses it; a message it cannot parse is dropped without an
answer. So a 100 MB line held 2.6 GB and ran past two minutes, and a request nested 100,000 deep
left its client waiting for an answer that never came. Here a line longer than
`MAX_MESSAGE_BYTES` is read to its end in chunks and never held, and a line the server's own
screen refuses is not handed on (one it accepts is handed on as the screen returns it). Where a
refused line names its request id, the server is handed instead a request for a method named
after the refusal, which it answers as an error (`Method not found`, the refusal in its
`data`), so the client is answered; else the refusal is one line on stderr.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import BinaryIO

MAX_MESSAGE_BYTES = 4 << 20  # an agent's largest message is a query of a few KB
_HEAD_BYTES = 4096  # where a refused line's request id is looked for
_CHUNK = 1 << 20
# the request id, before any "params" (clients write jsonrpc, id, method, then params)
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}(?=\s*[,}])|"(?:[^"\\\r\n]|\\.){0,256}")')
_PARAMS = re.compile(rb'"params"\s*:')


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


class BoundedLines:
    """A text reader of `raw`'s lines (as `anyio.wrap_file` iterates one: `readline` until "")
    that hands on only lines of at most `limit` bytes that `screen` accepts, as it returns them
    (it raises on a line it refuses, with a message saying why)."""

    def __init__(
        self,
        raw: BinaryIO,
        screen: Callable[[str], str],
        limit: int = MAX_MESSAGE_BYTES,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self._raw = raw
        self._screen = screen
        self._limit = limit
        self._warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))

    def readline(self, size: int = -1) -> str:
        while True:
            line = self._raw.readline(self._limit + 1)
            if not line:
                return ""
            if len(line) > self._limit and not line.endswith(b"\n"):
                skipped = len(line) + self._skip_line()
                refused = self._refused(line[:_HEAD_BYTES], f"a message of {skipped:,} bytes (over {self._limit:,})")
            else:
                text = line.decode("utf-8", errors="replace")
                if not text.strip():
                    continue
                try:
                    return self._screen(text)
                except Exception as exc:  # the screen's refusal, whatever its type
                    why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                    refused = self._refused(line[:_HEAD_BYTES], f"a message that is no JSON-RPC message ({why})")
            if refused is not None:
                return refused

    def _skip_line(self) -> int:
        """Read past the rest of the current line; its bytes skipped (its newline not counted)."""
        skipped = 0
        while True:
            chunk = self._raw.readline(_CHUNK)
            skipped += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                return skipped - chunk.endswith(b"\n")

    def _refused(self, head: bytes, what: str) -> str | None:
        """The line handed on instead of a refused one: a request the server answers with an
        error naming the refusal, where the id is known; else None (said on stderr)."""
        ident = request_id(head)
        if ident is None:
            self._warn(f"atlas mcp: refused {what}; it names no request id to answer")
            return None
        request = {"jsonrpc": "2.0", "id": ident, "method": f"refused: {what}"}
        return json.dumps(request) + "\n"

    def close(self) -> None:
        """The descriptor is the server's; it is not closed here."""
