"""Headless Chromium for the tests that look at reports and dashboards: Playwright driving the system browser
(Debian's chromium, `executable_path`; `playwright install` downloads browsers, which this project never
does). A page is opened at a given size and colour scheme; its console errors, uncaught exceptions and
requests are recorded, and every request that is not for a local file is refused before it leaves the
machine (a self-contained report makes none, and a test page that does must not reach the network).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DESKTOP = (1280, 900)
PHONE = (390, 844)
LOCAL_SCHEMES = ("file:", "data:", "about:")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


def missing() -> str | None:
    """Why no browser test can run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e .[dev])"
    if find_chromium() is None:
        return "headless Chromium (Debian package chromium) not installed"
    return None


@dataclass
class PageReport:
    """What one page did while it was open."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """Everything that should not happen when a student opens a self-contained report."""
        external = [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]
        return self.console_errors + self.exceptions + [f"network request: {u}" for u in external]


class Chromium:
    """One headless browser process; use as a context manager."""

    def __init__(
        self, executable: str | None = None, timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> None:
        self.executable = executable or find_chromium()
        if not self.executable:
            raise RuntimeError("no chromium executable found")
        self.timeout_ms = timeout * 1000
        self.env = {**os.environ, **env} if env else None  # extra variables for the browser (e.g. fontconfig)

    def __enter__(self) -> Chromium:
        from playwright.sync_api import sync_playwright  # imported here: only where the tests can run

        self._playwright = sync_playwright().start()
        try:
            # --no-sandbox: the tests run as root here, where Chromium's own sandbox refuses to start
            self._browser = self._playwright.chromium.launch(
                executable_path=self.executable, args=["--no-sandbox", "--disable-gpu"], timeout=self.timeout_ms,
                env=self.env,
            )
        except BaseException:
            self._playwright.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._browser.close()
        finally:
            self._playwright.stop()

    def open(
        self,
        path: Path,
        width: int = DESKTOP[0],
        height: int = DESKTOP[1],
        scheme: Literal["light", "dark"] = "light",
        mobile: bool = False,
    ) -> ReportPage:
        context = self._browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1, is_mobile=mobile,
            color_scheme=scheme,
        )
        context.set_default_timeout(self.timeout_ms)
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(LOCAL_SCHEMES)
                      else route.abort("blockedbyclient"))
        page = context.new_page()
        url = Path(path).resolve().as_uri()
        report = PageReport(url=url)
        page.on("console", lambda m: report.console_errors.append(m.text) if m.type in ("error", "assert")
                else None)
        page.on("pageerror", lambda error: report.exceptions.append(str(error)))
        page.on("request", lambda request: report.requests.append(request.url))
        page.goto(url, wait_until="load")
        return ReportPage(page, report, width)


@dataclass
class ReportPage:
    page: Any  # playwright.sync_api.Page
    report: PageReport
    width: int

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression evaluated in the page."""
        return self.page.evaluate(expression)

    def screenshot(self, out: Path, full_page: bool = True, region: tuple[int, int] | None = None) -> Path:
        """A PNG of the whole page (or of the viewport, or of the rows [top, top + height) of region)."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if region:
            content_height = self.evaluate("document.documentElement.scrollHeight")
            top, height = region
            height = max(1, min(height, content_height - top, 16000))
            clip = {"x": 0, "y": top, "width": self.width, "height": height}
            self.page.screenshot(path=out, full_page=True, clip=clip)
        else:
            self.page.screenshot(path=out, full_page=full_page)
        return out

    def close(self) -> None:
        self.page.context.close()
