"""A small Chrome DevTools Protocol client for headless Chromium, standard library only.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol commands from file descriptor 3
and writes replies and events to descriptor 4, one JSON message per NUL-terminated chunk. No websocket,
no WebDriver and no pip package are needed; only Debian's ``chromium`` package.
"""
from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-extensions", "--no-first-run",
         "--no-default-browser-check", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")
INSTALL_HINT = "install Debian's chromium package (as root: apt-get install -y chromium)"


def find_chromium() -> str | None:
    """Path of a Chromium binary, or None. $CHROMIUM overrides the search."""
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


class Browser:
    """One headless Chromium with one tab of ``width`` x ``height`` CSS pixels at device scale 1."""

    def __init__(self, binary: str, width: int = 1280, height: int = 1000, timeout: float = 60.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.events: list[dict] = []
        self._id = 0
        self._replies: queue.Queue = queue.Queue()
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        cmd_r, cmd_w = os.pipe()   # we write commands, Chromium reads them on fd 3
        out_r, out_w = os.pipe()   # Chromium writes on fd 4, we read

        def fds_3_4():
            a, b = os.dup(cmd_r), os.dup(out_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds_3_4, pass_fds=(3, 4))
        os.close(cmd_r)
        os.close(out_w)
        self._out = os.fdopen(cmd_w, "wb")
        threading.Thread(target=self._read, args=(os.fdopen(out_r, "rb"),), daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=self.session)
        self._metrics(width, height)

    def _read(self, pipe) -> None:
        buf = b""
        while chunk := pipe.read1(1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._replies.put(json.loads(m))
        self._replies.put(None)  # Chromium exited

    def _next(self, deadline: float, what: str) -> dict:
        try:
            msg = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"Chromium: no {what} within {self.timeout} s") from None
        if msg is None:
            raise RuntimeError(f"Chromium exited (code {self._proc.poll()}) while waiting for {what}")
        return msg

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result; events that arrive meanwhile go to ``self.events``."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        self._out.flush()
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._next(deadline, f"reply to {method}")
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event; ``self.events`` then holds only this page's events."""
        self.events = []
        result = self.call("Page.navigate", session=self.session, url=url)
        if result.get("errorText"):
            raise RuntimeError(f"{url}: {result['errorText']}")
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._next(deadline, f"load event of {url}"))

    def evaluate(self, expression: str):
        """Value of a JavaScript expression in the page (promises are awaited)."""
        result = self.call("Runtime.evaluate", session=self.session, expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """console.error calls, uncaught exceptions and browser-logged errors (failed loads) of this page."""
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                        for a in p["args"]))
            elif method == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
            elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}".rstrip())
        return out

    def screenshot(self, path: Path) -> None:
        """PNG of the whole page at the window's width: the window is made as tall as the page for the
        capture (``captureBeyondViewport`` shifts this theme's layout sideways), then restored."""
        height = self.call("Page.getLayoutMetrics", session=self.session)["cssContentSize"]["height"]
        self._metrics(self.width, max(self.height, int(height)))
        try:
            png = self.call("Page.captureScreenshot", session=self.session, format="png")["data"]
        finally:
            self._metrics(self.width, self.height)
        Path(path).write_bytes(base64.b64decode(png))

    def resize(self, width: int, height: int) -> None:
        """The window's size from now on (the next `goto` loads pages at it)."""
        self.width, self.height = width, height
        self._metrics(width, height)

    def _metrics(self, width: int, height: int) -> None:
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._out.close()
        self._profile.cleanup()
