"""Issue 25 item 8: with JSON logging asked for (SOLARIS_LOG_JSON, as the k8s ConfigMap sets it),
every line a process writes is a JSON record: the banners of ``serve`` / ``exporter`` and the
"fetched" line of ``models fetch`` (the init container), the error lines of any command, and an
uncaught exception's traceback. Without it they stay console lines for people; a command whose
stdout is its product (``models pack``'s digest) still prints it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from streams.cli.main import app
from streams.settings import REPO_ROOT

JSON_ENV = {"SOLARIS_LOG_JSON": "true", "SOLARIS_LOG_LEVEL": "INFO"}


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    hooks = sys.excepthook, threading.excepthook, sys.unraisablehook
    yield
    logging.getLogger().handlers.clear()
    logging.captureWarnings(False)
    sys.excepthook, threading.excepthook, sys.unraisablehook = hooks


def json_records(text: str) -> list[dict[str, Any]]:
    """Every non-empty line of ``text`` parsed as a JSON object (fails on the first that is not)."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}\nfull output:\n{text}")
        assert isinstance(record, dict), line
        records.append(record)
    return records


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner(env={**JSON_ENV, **(env or {})}).invoke(app, args)


def test_serve_banner_is_a_json_record(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.serve import server

    monkeypatch.setattr(server.web, "run_app", lambda *a, **k: None)  # no listening socket
    result = _invoke(
        ["serve", "--host", "127.0.0.1", "--port", "18099"], {"SOLARIS_STORE_BACKEND": "memory"}
    )
    assert result.exit_code == 0, result.output
    records = json_records(result.output)
    banner = next(r for r in records if r["event"].startswith("feature server: "))
    assert banner["url"] == "http://127.0.0.1:18099/v1/features"
    assert banner["store_backend"] == "memory" and banner["state_tier"] is False


def test_exporter_banner_is_a_json_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    import streams.lag_exporter

    class FakeExporter:
        interval_s = 0.5

        def __init__(self, *_: object) -> None:
            pass

        def start(self, port: int | None = None) -> FakeExporter:
            return self

        def request_stop(self) -> None: ...

        def wait(self) -> None: ...

        def stop(self) -> None: ...

    monkeypatch.setattr(streams.lag_exporter, "LagExporter", FakeExporter)
    monkeypatch.setattr(signal, "signal", lambda *_: None)
    result = _invoke(["exporter", "--port", "19104"])
    assert result.exit_code == 0, result.output
    (banner,) = (r for r in json_records(result.output) if r["event"].startswith("lag exporter"))
    assert banner["url"].endswith(":19104/metrics") and banner["interval_s"] == 0.5


def test_models_fetch_line_is_a_json_record(tmp_path: Path) -> None:
    from streams.bundle_fetch import pack

    bundle = tmp_path / "src" / "bundle-abc123"
    bundle.mkdir(parents=True)
    (bundle / "meta.json").write_text('{"model_version": "v1"}')
    archive = tmp_path / "site" / "b.tar.gz"
    archive.parent.mkdir()
    digest = pack(bundle, archive)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(archive.parent)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/b.tar.gz"
        args = ["models", "fetch", "--url", url, "--sha256", digest, "--dest", str(tmp_path / "d")]
        result = _invoke(args)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.exit_code == 0, result.output
    (line,) = (r for r in json_records(result.output) if r["event"].startswith("fetched "))
    assert line["sha256"] == digest and line["bundle"] == str(tmp_path / "d" / "bundle-abc123")


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["models", "fetch"], 2, "SOLARIS_BUNDLE_URL and SOLARIS_BUNDLE_SHA256 not set"),
        (["worker", "--agents", "embed,history"], 2, "run 'embed' alone"),
        (
            ["data", "traffic", "--dataset", "movielens", "--columns", "u=x", "--out", "t.avro"],
            2,
            "log",
        ),
        (["replay"], 2, "give a traffic FILE or --from-topic"),
    ],
)
def test_error_lines_are_json_records(args: list[str], code: int, words: str) -> None:
    env = {"SOLARIS_BUNDLE_URL": "", "SOLARIS_BUNDLE_SHA256": ""}
    result = _invoke(args, env)
    assert result.exit_code == code, result.output
    errors = [r for r in json_records(result.output) if r["level"] == "error"]
    assert any(words in r["event"] for r in errors), result.output


def test_error_lines_stay_console_text_without_json() -> None:
    result = CliRunner(env={"SOLARIS_LOG_JSON": "false"}).invoke(
        app, ["worker", "--agents", "embed,history"]
    )
    assert result.exit_code == 2
    assert result.output.strip() == "run 'embed' alone (its own group) or with every role ('all')"


def test_an_uncaught_exception_is_one_json_record(tmp_path: Path) -> None:
    """The real entry point (``python -m streams.cli``): the ranker finds no bundle and raises."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")}
    env.update(JSON_ENV, SOLARIS_MODEL_DIR=str(tmp_path), SOLARIS_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run(
        [sys.executable, "-m", "streams.cli", "ranker"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip() == ""
    (record,) = json_records(proc.stderr)
    assert record["level"] == "critical" and "no trained bundle" in record["event"]
    assert "Traceback" in record["exception"]


@pytest.mark.parametrize("json_logs", [True, False])
def test_faust_worker_is_quiet_with_json_logs(json_logs: bool) -> None:
    """Faust prints " OK ^" and spinner escapes itself (not through logging) unless quiet."""
    import faust

    from streams.cli.live_cmd import _faust_worker_class
    from streams.logs import configure_logging

    configure_logging("WARNING", json=json_logs)
    app = faust.App(f"solaris-test-quiet-{json_logs}", broker="kafka://127.0.0.1:1")
    worker = _faust_worker_class()(app, loglevel="warning")
    assert worker.quiet is json_logs
    assert (worker.spinner is None) is json_logs


def test_warnings_and_ignored_exceptions_are_json_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import warnings

    from streams.logs import configure_logging, log_uncaught_exceptions

    configure_logging("INFO", json=True)
    log_uncaught_exceptions()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)  # catch_warnings put the stock showwarning back
        warnings.warn("old knob", UserWarning, stacklevel=1)
    hook_args = SimpleNamespace(
        exc_type=ValueError,
        exc_value=ValueError("bad"),
        exc_traceback=None,
        err_msg=None,
        object="x",
    )
    sys.unraisablehook(hook_args)  # type: ignore[arg-type]
    captured = capsys.readouterr()
    assert captured.out == ""
    warned, ignored = json_records(captured.err)
    assert warned["logger"] == "py.warnings" and "old knob" in warned["event"]
    assert ignored["level"] == "error" and "ValueError: bad" in ignored["event"]
