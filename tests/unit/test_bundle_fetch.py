"""Model delivery for Kubernetes (issue 25 item 1): `solaris models pack` writes a bundle as one
archive, `solaris models fetch` downloads it by URL (a local http.server on 127.0.0.1 here),
refuses it unless its sha256 matches and refuses members outside the bundle directory; a failed
fetch leaves nothing in the destination."""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.bundle_fetch import BundleFetchError, fetch, pack, redact_url, sha256_file
from streams.cli.main import app


@dataclass
class Served:
    """Files served by path; ``fail_first`` statuses are answered before the real body."""

    files: dict[str, bytes] = field(default_factory=dict)
    fail_first: list[int] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    base: str = ""


@pytest.fixture
def server() -> Iterator[Served]:
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append(self.path)
            status = served.fail_first.pop(0) if served.fail_first else 200
            body = served.files.get(self.path) if status == 200 else b"no"
            if body is None:
                status, body = 404, b"not found"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    served.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


def _bundle(root: Path, name: str = "bundle-abc123") -> Path:
    bundle = root / name
    (bundle / "sub").mkdir(parents=True)
    (bundle / "meta.json").write_text('{"model_version": "v1"}')
    (bundle / "fm.onnx").write_bytes(bytes(range(256)) * 40)
    (bundle / "sub" / "extra.bin").write_bytes(b"x" * 10)
    return bundle


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes = b"{}") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def test_pack_then_fetch_over_http_gives_the_same_bundle(tmp_path: Path, server: Served) -> None:
    bundle = _bundle(tmp_path / "src")
    out = tmp_path / "pub" / "b.tar.gz"
    digest = pack(bundle, out)
    assert digest == sha256_file(out) == hashlib.sha256(out.read_bytes()).hexdigest()
    assert pack(bundle, tmp_path / "again.tar.gz") == digest  # reproducible bytes
    server.files["/b.tar.gz"] = out.read_bytes()
    dest = tmp_path / "models"
    got = fetch(f"{server.base}/b.tar.gz", digest.upper(), dest)
    assert got.bundle == dest / "bundle-abc123" and got.sha256 == digest
    assert _tree(got.bundle) == _tree(bundle)
    assert sorted(p.name for p in dest.iterdir()) == ["bundle-abc123"]  # no scratch left
    # a second fetch (an init container run again in the same pod) replaces it in place
    fetch(f"{server.base}/b.tar.gz", digest, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["bundle-abc123"]


def test_wrong_hash_is_refused_and_leaves_nothing(tmp_path: Path, server: Served) -> None:
    out = tmp_path / "b.tar.gz"
    digest = pack(_bundle(tmp_path / "src"), out)
    server.files["/b.tar.gz"] = out.read_bytes()
    dest = tmp_path / "models"
    wrong = hashlib.sha256(b"another archive").hexdigest()
    with pytest.raises(BundleFetchError, match=f"sha256 mismatch.*expected {wrong}, got {digest}"):
        fetch(f"{server.base}/b.tar.gz", wrong, dest)
    assert list(dest.iterdir()) == []
    assert len(server.requests) == 1  # a mismatch is not retried


@pytest.mark.parametrize(
    "members",
    [
        [_file("bundle-x/meta.json"), _file("bundle-x/../../evil.txt", b"pwned")],
        [_file("bundle-x/meta.json"), _file("/tmp/evil-abs.txt", b"pwned")],
        [_file("bundle-x/meta.json"), _file("other/evil.txt", b"pwned")],
    ],
    ids=["dotdot", "absolute", "second-top-level"],
)
def test_members_outside_the_bundle_are_refused(
    tmp_path: Path, server: Served, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    data = _archive(list(members))
    server.files["/evil.tar.gz"] = data
    dest = tmp_path / "a" / "models"
    with pytest.raises(BundleFetchError, match=r"outside the bundle|exactly one bundle-"):
        fetch(f"{server.base}/evil.tar.gz", hashlib.sha256(data).hexdigest(), dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "a" / "evil.txt").exists()


def test_links_in_the_archive_are_refused(tmp_path: Path, server: Served) -> None:
    link = tarfile.TarInfo("bundle-x/fm.onnx")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    data = _archive([_file("bundle-x/meta.json"), (link, None)])
    server.files["/l.tar.gz"] = data
    dest = tmp_path / "models"
    with pytest.raises(BundleFetchError, match="not a regular file"):
        fetch(f"{server.base}/l.tar.gz", hashlib.sha256(data).hexdigest(), dest)
    assert list(dest.iterdir()) == []


def test_server_errors_are_retried_and_a_404_is_not(tmp_path: Path, server: Served) -> None:
    out = tmp_path / "b.tar.gz"
    digest = pack(_bundle(tmp_path / "src"), out)
    server.files["/b.tar.gz"] = out.read_bytes()
    server.fail_first = [503, 502]
    got = fetch(f"{server.base}/b.tar.gz", digest, tmp_path / "models", attempts=3)
    assert got.bundle.is_dir() and len(server.requests) == 3
    server.requests.clear()
    with pytest.raises(BundleFetchError, match="404"):
        fetch(f"{server.base}/missing.tar.gz", digest, tmp_path / "m2", attempts=3)
    assert len(server.requests) == 1


def test_cli_pack_prints_the_hash_and_fetch_reads_the_settings(
    tmp_path: Path, server: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = _bundle(tmp_path / "src")
    out = tmp_path / "b.tar.gz"
    runner = CliRunner()
    packed = runner.invoke(app, ["models", "pack", str(bundle), str(out)])
    assert packed.exit_code == 0, packed.output
    digest = packed.output.split()[0]
    assert packed.output.strip() == f"{sha256_file(out)}  {out}"
    server.files["/b.tar.gz"] = out.read_bytes()
    monkeypatch.setenv("SOLARIS_BUNDLE_URL", f"{server.base}/b.tar.gz")
    monkeypatch.setenv("SOLARIS_BUNDLE_SHA256", digest)
    monkeypatch.setenv("SOLARIS_MODEL_DIR", str(tmp_path / "models"))
    fetched = runner.invoke(app, ["models", "fetch"])
    assert fetched.exit_code == 0, fetched.output
    assert (tmp_path / "models" / "bundle-abc123" / "meta.json").is_file()
    monkeypatch.setenv("SOLARIS_BUNDLE_URL", "")
    refused = runner.invoke(app, ["models", "fetch"])
    assert refused.exit_code == 2 and "SOLARIS_BUNDLE_URL" in refused.output


def test_pack_refuses_a_folder_that_is_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleFetchError, match="not a trained bundle"):
        pack(tmp_path, tmp_path / "x.tar.gz")


def test_url_credentials_never_reach_logs_or_errors(
    tmp_path: Path, server: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A bundle URL may carry a token (presigned URLs, ``?token=``): retries are logged and
    failures raised with the URL's host and path, never its secret parts."""
    secret = "s3cr3t-T0KEN"
    base = server.base.replace("http://", f"http://reader:{secret}@")
    url = f"{base}/missing.tar.gz?token={secret}&X-Amz-Signature={secret}#{secret}"
    server.fail_first = [503]
    with caplog.at_level(logging.DEBUG), pytest.raises(BundleFetchError) as raised:
        fetch(url, "0" * 64, tmp_path / "m", attempts=2)
    assert "retrying" in caplog.text  # the 503 was logged
    shown = (
        caplog.text
        + str(raised.value)
        + "".join(str(getattr(r, "url", "")) + str(getattr(r, "error", "")) for r in caplog.records)
    )
    assert secret not in shown
    assert "/missing.tar.gz" in str(raised.value) and "token=***" in str(raised.value)


def test_redact_url_keeps_what_helps_debugging() -> None:
    got = redact_url("https://u:pw@host:8443/a/b.tar.gz?token=abc&v=1#frag")
    assert got == "https://u:***@host:8443/a/b.tar.gz?token=***&v=***#***"
    assert redact_url("https://host/a.tar.gz") == "https://host/a.tar.gz"
