"""Headless Chromium on a report file: its DOM after load, and a screenshot.

Used by the report's rendering test and by ``solaris demo`` (a screenshot next to the report when
Chromium is installed: ``infra/chromium.sh install``). Each call is one short browser process
with its own throwaway profile dir, so calls never share state or lock each other's profile;
a call that outlives ``timeout_s`` is killed and raises :class:`ReportError`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from streams.errors import StreamsError

#: Debian names the binary ``chromium``; other distributions ``chromium-browser``
BINARIES = ("chromium", "chromium-browser")
#: let the page's load handlers run before the DOM is dumped or the picture taken
VIRTUAL_TIME_MS = 5000


class ReportError(StreamsError):
    """The browser could not load or capture a report."""


def find_chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    for name in BINARIES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _run(browser: str, args: list[str], timeout_s: float) -> str:
    with tempfile.TemporaryDirectory(prefix="solaris-chromium-") as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={VIRTUAL_TIME_MS}",
            *args,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ReportError(f"chromium did not finish within {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        raise ReportError(f"chromium exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dump_dom(browser: str, page: Path, timeout_s: float = 90.0) -> str:
    """The page's DOM (serialized HTML) after its load handlers ran."""
    return _run(browser, ["--dump-dom", page.resolve().as_uri()], timeout_s)


def screenshot(
    browser: str,
    page: Path,
    out: Path,
    size: tuple[int, int] = (1280, 2000),
    timeout_s: float = 90.0,
) -> Path:
    """A PNG of the page's first ``size`` pixels (width, height) at ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    _run(
        browser,
        [
            f"--screenshot={out.resolve()}",
            f"--window-size={size[0]},{size[1]}",
            page.resolve().as_uri(),
        ],
        timeout_s,
    )
    if not out.exists() or out.stat().st_size == 0:
        raise ReportError(f"chromium wrote no screenshot at {out}")
    return out
