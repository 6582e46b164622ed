"""Headless Chromium driven over the DevTools protocol on a pipe (a test helper; no extra package).

with Chromium.start(tmp_path) as browser:   # pytest.skip when no Chromium is installed
    browser.open(page.as_uri())
    browser.evaluate("document.title")
    assert not browser.errors                 # console errors and uncaught exceptions
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Chromium:
    def __init__(self, proc: subprocess.Popen, send_fd: int, recv_fd: int) -> None:
        self._proc, self._send, self._recv = proc, send_fd, recv_fd
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []

    @classmethod
    def start(cls, profile: Path) -> Chromium:
        binary = chromium_binary()
        if binary is None:
            pytest.skip("no Chromium on this machine")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()

        def pipes_on_3_and_4() -> None:  # Chromium reads commands on fd 3 and writes on fd 4
            read, write = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(read, 3)
            os.dup2(write, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=pipes_on_3_and_4,  # a single-threaded test helper
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        return cls(proc, to_chrome_w, from_chrome_r)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self._call("Browser.close", session=False, timeout=5)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._send)
        os.close(self._recv)

    # --- protocol ---------------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._recv], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._recv, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(str(details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))

    def _call(self, method: str, params: dict[str, Any] | None = None, session: bool = True, timeout: float = 60):
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._record(reply)

    def _wait_for(self, method: str, timeout: float = 60) -> None:
        if any(e.get("method") == method for e in self.events):
            return
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self._record(event)
            if event.get("method") == method:
                return

    # --- what tests use ---------------------------------------------------------------------------

    def open(self, url: str, settle_s: float = 0.5) -> None:
        """Load `url` in a new tab and wait for its load event."""
        target = self._call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        attached = self._call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)
        self._session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self._call(f"{domain}.enable")
        self.events.clear()
        self._call("Page.navigate", {"url": url})
        self._wait_for("Page.loadEventFired")
        time.sleep(settle_s)
        self.evaluate("0")  # collect the events that arrived meanwhile

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable results)."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")
