"""A real headless Chromium (Debian's `chromium`), driven over the DevTools protocol on a pipe.

    with Browser() as b:
        b.open(url)                   navigate and wait for the load event
        b.eval("document.title")      a JavaScript expression's value
        b.screenshot(path)            a PNG of the page
        b.errors                      console errors, uncaught exceptions, failed loads seen so far

--remote-debugging-pipe speaks JSON messages ended by NUL on file descriptors 3
(commands) and 4 (answers and events): no websocket library needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

Message = dict[str, Any]  # a DevTools protocol message (JSON)


def _as_fds_3_and_4(commands: int, answers: int) -> None:
    import fcntl

    # Out of the way first: either may already be 3 or 4.
    commands, answers = fcntl.fcntl(commands, fcntl.F_DUPFD, 10), fcntl.fcntl(answers, fcntl.F_DUPFD, 10)
    os.dup2(commands, 3)
    os.dup2(answers, 4)


class Browser:
    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self.binary = shutil.which("chromium") or shutil.which("google-chrome")  # Debian; GitHub runners
        self.size = (width, height)
        self.errors: list[str] = []
        self._id = 0
        self._buffer = b""

    def __enter__(self) -> Browser:
        if not self.binary:
            raise RuntimeError("chromium is not installed (.ci/run installs it: apt-get install chromium)")
        self._profile = tempfile.TemporaryDirectory(prefix="tfaot-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # The child sees our pipe ends as its fds 3 and 4 (set after the fork; close_fds would close them
        # again, and every other descriptor of ours is close-on-exec anyway).
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={self.size[0]},{self.size[1]}",
                "about:blank",
            ],
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: _as_fds_3_and_4(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._out, self._in = to_browser_w, from_browser_r
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self._call(f"{domain}.enable", session=True)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The browser may already be gone; closing it is best effort.
        with contextlib.suppress(Exception):
            self._call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)
        self._profile.cleanup()

    def open(self, url: str, timeout: float = 60) -> None:
        answer = self._call("Page.navigate", {"url": url}, session=True)
        if answer.get("errorText"):
            raise AssertionError(f"{url}: {answer['errorText']}")
        self._wait_event("Page.loadEventFired", timeout)

    def eval(self, expression: str) -> Any:  # the value as JSON gives it
        answer = self._call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self._call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=True
        )["data"]
        path.write_bytes(base64.b64decode(data))

    # ------------------------------------------------------------ protocol

    def _call(
        self, method: str, params: Message | None = None, session: bool = False, timeout: float = 60
    ) -> Message:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                result: Message = reply.get("result", {})
                return result

    def _wait_event(self, method: str, timeout: float) -> Message:
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("method") == method:
                return message

    def _read(self, deadline: float) -> Message:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise AssertionError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: Message = json.loads(raw)
        self._note(message)
        return message

    def _note(self, message: Message) -> None:
        """Keep everything a page reports as an error."""
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                "console: "
                + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(details.get("exception", {}).get("description", details)))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}")
