"""A small timed demo run, its HTML report, and that report opened in headless Chromium: every
plot decoded and laid out at a real size (from the DOM after load) and a screenshot that is not
blank. Chromium comes from Debian (``infra/chromium.sh install``); without it the test skips, or
installs it when ``SOLARIS_REQUIRE_SERVICES=1``."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

from streams.settings import REPO_ROOT, Settings
from tests.integration.live_harness import TINY_TRAIN

pytestmark = pytest.mark.integration

#: wall seconds the timed replay of the test traffic should take
REPLAY_S = 15.0


def chromium_or_skip() -> str:
    from streams.app.report_html.browser import find_chromium

    browser = find_chromium()
    if browser is not None:
        return browser
    if not Settings().require_services:
        pytest.skip("chromium is not installed (infra/chromium.sh install)")
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "infra" / "chromium.sh"), "path"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_demo_report_renders_every_plot_in_chromium(
    bundle: Path, traffic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the report's plots need the train extra")
    from models.data.traffic import load_requests
    from streams.app.demo import run_demo
    from streams.app.report_html.browser import dump_dom, screenshot
    from streams.app.report_html.page import write_report
    from streams.cli.demo_cmd import _offline
    from tests.conftest import require_kafka_and_redis

    browser = chromium_or_skip()
    # the children read their settings from the environment, as `solaris demo`'s do
    unique = f"t{uuid.uuid4().hex[:10]}"
    for name, value in {
        "SOLARIS_TOPIC_PREFIX": unique,
        "SOLARIS_KEY_PREFIX": unique,
        "SOLARIS_EMBEDDING_DIM": str(TINY_TRAIN.embedding_dim),
        "SOLARIS_HISTORY_LEN": str(TINY_TRAIN.history_len),
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    require_kafka_and_redis(settings)
    times = load_requests(traffic).event_time_ms
    speed = (int(times.max()) - int(times.min())) / 1000.0 / REPLAY_S
    offline = _offline(settings, bundle, traffic)
    summary = run_demo(settings, traffic, bundle, tmp_path / "logs", speed, print, offline)

    assert summary["requests"] == len(times)
    assert summary["provenance"]["commit"] != "unknown"  # what the docs cite for the figures
    assert summary["timeline"], "no lag/counter samples during the replay"
    assert {len(s["lag"]) for s in summary["timeline"]} == {3}  # pipeline, fm, ranker
    assert summary["read_latency"]["count"] == len(times)  # the ranker's own histogram
    # every request's pipeline delay, on the replay's clock: its pairs are stored (embeddings)
    # no earlier than they were verified, and both come after the request itself
    delays = summary.pop("request_delays")
    assert delays.embedded and set(delays.embedded) <= set(delays.verified)
    assert all(0 <= delays.verified[r] <= d for r, d in delays.embedded.items())
    # the run's topics (and Faust's changelogs) were deleted once it had reported
    from streams.topics import admin_client

    left = admin_client(settings).list_topics(timeout=10).topics
    assert not [t for t in left if t.startswith(unique)], "the demo left its topics behind"

    page = write_report(summary, tmp_path / "report.html")
    dom = dump_dom(browser, page)
    assert 'data-probed="yes"' in dom, "the page's load handler did not run"
    imgs = re.findall(r"<img [^>]*>", dom)
    assert len(imgs) == 6
    for img in imgs:
        natural = re.search(r'data-natural="(\d+)x(\d+)"', img)
        rendered = re.search(r'data-rendered="(\d+)x(\d+)"', img)
        ink = re.search(r'data-ink="([0-9.]+)"', img)
        assert natural and rendered and ink, img[:200]
        assert min(map(int, natural.groups())) > 100, "an image has no size"
        assert min(map(int, rendered.groups())) > 100, "an image was not laid out"
        assert float(ink.group(1)) > 0.01, "an image decoded to nothing drawn"

    shot = screenshot(browser, page, tmp_path / "report.png", (1280, 1500))
    import matplotlib.image

    pixels = np.asarray(matplotlib.image.imread(shot))[..., :3]
    not_white = (pixels < 0.95).any(axis=-1).mean()
    colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert not_white > 0.05, f"screenshot nearly blank ({not_white:.1%} non-white pixels)"
    assert colours > 200, f"screenshot has only {colours} colours: plots missing"


def test_simulate_sweep_writes_its_png_without_json(
    bundle: Path, traffic: Path, tmp_path: Path
) -> None:
    """`solaris simulate --sweep` with no --json leaves its plot under out/ and says where."""
    import os
    import sys

    pytest.importorskip("matplotlib", reason="the sweep plot needs the train extra")
    env = {
        **os.environ,
        "SOLARIS_BUNDLE_DIR": str(bundle),
        "SOLARIS_EMBEDDING_DIM": str(TINY_TRAIN.embedding_dim),
        "SOLARIS_HISTORY_LEN": str(TINY_TRAIN.history_len),
        "PYTHONPATH": str(REPO_ROOT),
        "COLUMNS": "200",
    }
    args = ["simulate", "--traffic", str(traffic), "--sweep", "--sweep-ttl", "1", "--no-random"]
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    pngs = list((tmp_path / "out").glob("sweep-*.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:4] == b"\x89PNG"
    assert str(pngs[0]) in done.stdout
