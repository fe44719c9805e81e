"""Headless Chromium, driven over the DevTools protocol on a pipe: load a report, collect console errors and
network requests, take screenshots at a given width and colour scheme.

The pipe (--remote-debugging-pipe: commands on fd 3, replies on fd 4, NUL-terminated JSON) needs no port
and no extra package, and it gives exact events rather than scraped log lines. One browser serves many
pages; each ReportPage gets a fresh tab with its own device metrics and emulated prefers-color-scheme.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    "--hide-scrollbars",
    "--mute-audio",
]

DESKTOP = (1280, 900)
PHONE = (390, 844)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


class BrowserError(RuntimeError):
    pass


@dataclass
class PageReport:
    """What one page load produced."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """Everything that should not happen when a student opens a self-contained report."""
        external = [u for u in self.requests if not u.startswith(("file:", "data:", "about:"))]
        return (
            self.console_errors
            + self.exceptions
            + self.log_errors
            + [f"network request: {u}" for u in external]
        )


class Chromium:
    """One headless browser process; use as a context manager."""

    def __init__(self, executable: str | None = None, timeout: float = 30.0) -> None:
        self.executable = executable or find_chromium()
        if not self.executable:
            raise BrowserError("no chromium executable found")
        self.timeout = timeout
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="bang-grader-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child must see its pipe ends as fd 3 (it reads) and fd 4 (it writes). Moving them above 10
        # first means the dup2 calls in the child cannot overwrite one another.
        child_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_r)
        os.close(from_browser_w)

        def wire_pipes() -> None:
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        try:
            self._proc = subprocess.Popen(
                [self.executable, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(3, 4),
                preexec_fn=wire_pipes,
            )
        finally:
            os.close(child_r)
            os.close(child_w)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    # --- protocol ---------------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError("timed out waiting for chromium")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium closed the pipe (exit {self._proc.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout or self.timeout)
        for i, event in enumerate(self._events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self._events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self._events.append(event)

    def drain(self, session: str) -> list[dict[str, Any]]:
        mine = [e for e in self._events if e.get("sessionId") == session]
        self._events = [e for e in self._events if e.get("sessionId") != session]
        return mine

    # --- pages ------------------------------------------------------------------------------------

    def open(
        self,
        path: Path,
        width: int = DESKTOP[0],
        height: int = DESKTOP[1],
        scheme: Literal["light", "dark"] = "light",
        mobile: bool = False,
    ) -> ReportPage:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
            session=session,
        )
        self.send(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
            session=session,
        )
        url = Path(path).resolve().as_uri()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        page = ReportPage(self, session, target, PageReport(url=url), width)
        page.collect()
        return page


@dataclass
class ReportPage:
    browser: Chromium
    session: str
    target: str
    report: PageReport
    width: int

    def collect(self) -> PageReport:
        for event in self.browser.drain(self.session):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.report.console_errors.append(text)
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                self.report.exceptions.append(
                    details.get("exception", {}).get("description") or details.get("text", "")
                )
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                self.report.log_errors.append(f"{entry.get('source')}: {entry.get('text')}")
            elif method == "Network.requestWillBeSent":
                self.report.requests.append(params.get("request", {}).get("url", ""))
        return self.report

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression evaluated in the page (the report has no script of its own)."""
        result = self.browser.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"evaluate failed: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def screenshot(self, out: Path, full_page: bool = True, region: tuple[int, int] | None = None) -> Path:
        """A PNG of the whole page (or of the viewport, or of the rows [top, top + height) of region)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page or region:
            metrics = self.browser.send("Page.getLayoutMetrics", session=self.session)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            top, height = region or (0, size["height"])
            height = max(1, min(height, size["height"] - top, 16000))
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": top, "width": self.width, "height": height, "scale": 1}
        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        self.collect()
        return out

    def close(self) -> None:
        self.collect()
        self.browser.send("Target.closeTarget", {"targetId": self.target})
