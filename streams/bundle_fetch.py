"""Deliver a trained bundle as one archive: ``pack`` it, then ``fetch`` it by URL with its sha256.

``solaris models pack BUNDLE_DIR OUT.tar.gz`` writes a gzip'd tar whose only top-level entry is
the bundle directory (``bundle-<key>/...``, regular files only, reproducible bytes) and prints
its sha256. ``solaris models fetch`` (a Kubernetes init container) downloads such an archive,
refuses it unless its sha256 is the expected one, refuses members that would land outside the
bundle directory, and only then moves the extracted bundle into the destination: a failed fetch
leaves nothing there.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import logging
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from streams.errors import StreamsError

log = logging.getLogger(__name__)
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
BUNDLE_PREFIX = "bundle-"
CHUNK = 1 << 20


class BundleFetchError(StreamsError):
    """A bundle archive could not be packed, downloaded, verified or unpacked."""


@dataclass(frozen=True)
class Fetched:
    bundle: Path
    sha256: str
    size: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Same bytes for the same bundle: no owner, time or permission bits of this machine."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def pack(bundle_dir: Path, out: Path) -> str:
    """Write ``bundle_dir`` as a reproducible ``.tar.gz`` at ``out``; return its sha256."""
    bundle_dir = bundle_dir.resolve()
    if not bundle_dir.name.startswith(BUNDLE_PREFIX) or not (bundle_dir / "meta.json").is_file():
        raise BundleFetchError(
            f"{bundle_dir} is not a trained bundle (a {BUNDLE_PREFIX}* directory with meta.json)"
        )
    paths = sorted(bundle_dir.rglob("*"))
    odd = [p for p in paths if p.is_symlink() or not (p.is_file() or p.is_dir())]
    if odd:
        raise BundleFetchError(f"{bundle_dir} holds links or special files: {odd[:3]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    with (
        partial.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.add(bundle_dir, arcname=bundle_dir.name, recursive=False, filter=_reset)
        for path in paths:
            arcname = f"{bundle_dir.name}/{path.relative_to(bundle_dir).as_posix()}"
            tar.add(path, arcname=arcname, recursive=False, filter=_reset)
    partial.replace(out)
    return sha256_file(out)


def _transient(exc: BaseException) -> bool:
    """Worth another attempt: the network or a server error, not a 4xx or a bad archive."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code in (408, 429)
    return isinstance(exc, urllib.error.URLError | http.client.HTTPException | OSError)


def redact_url(url: str) -> str:
    """``url`` as logs and errors may show it: a password in it and every query or fragment
    value replaced by ``***`` (a bundle URL may carry a token: ``?token=...``, presigned
    URLs' signatures); the scheme, host, path and parameter names stay for debugging."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
        query = urllib.parse.urlencode(
            [(k, "***") for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)],
            safe="*",
        )
        fragment = "***" if parts.fragment else ""
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, fragment))
    except ValueError:  # not a URL at all: show none of it
        return "<unparsable URL>"


def _download(url: str, to: Path, timeout_s: float) -> str:
    """Stream ``url`` into ``to``; the sha256 of what was written."""
    digest = hashlib.sha256()
    try:
        opened = urllib.request.urlopen(url, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        exc.close()  # its socket, else left to the garbage collector
        raise
    with opened as resp, to.open("wb") as f:
        while chunk := resp.read(CHUNK):
            digest.update(chunk)
            f.write(chunk)
    return digest.hexdigest()


def _download_with_retries(url: str, to: Path, attempts: int, timeout_s: float) -> str:
    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.5, max=10),
        retry=retry_if_exception(_transient),
        before_sleep=lambda state: log.warning(
            "bundle download failed, retrying",
            extra={
                "url": redact_url(url),
                "attempt": state.attempt_number,
                "error": repr(state.outcome.exception() if state.outcome else None)[:500],
            },
        ),
        reraise=True,
    )
    try:
        return str(retrying(_download, url, to, timeout_s))
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise BundleFetchError(f"could not download {redact_url(url)}: {exc}") from exc


def _bundle_members(tar: tarfile.TarFile) -> tuple[str, list[tarfile.TarInfo]]:
    """The archive's one top-level ``bundle-*`` directory and its members; refuses links,
    devices, absolute paths, ``..`` and anything outside that directory."""
    members = tar.getmembers()
    tops = set()
    for m in members:
        parts = PurePosixPath(m.name).parts
        if not parts or m.name.startswith("/") or ".." in parts:
            raise BundleFetchError(f"archive member {m.name!r} points outside the bundle")
        if not (m.isfile() or m.isdir()):
            raise BundleFetchError(f"archive member {m.name!r} is not a regular file or folder")
        tops.add(parts[0])
    if len(tops) != 1 or not next(iter(tops)).startswith(BUNDLE_PREFIX):
        raise BundleFetchError(
            f"archive must hold exactly one {BUNDLE_PREFIX}* directory, found {sorted(tops)[:5]}"
        )
    return tops.pop(), members


def _unpack(archive: Path, into: Path) -> Path:
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            top, members = _bundle_members(tar)
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BundleFetchError(f"not a readable .tar.gz bundle archive: {exc}") from exc
    if not (into / top / "meta.json").is_file():
        raise BundleFetchError(f"{top} in the archive has no meta.json: not a trained bundle")
    return into / top


def fetch(url: str, sha256: str, dest: Path, attempts: int = 5, timeout_s: float = 60.0) -> Fetched:
    """Download the archive at ``url``, check its sha256, unpack its bundle into ``dest``.

    Everything happens in a scratch folder inside ``dest``; the bundle directory is moved into
    place only once the hash matched and every member was unpacked, so a failure leaves ``dest``
    as it was (a bundle of the same name already there is replaced)."""
    expected = sha256.strip().lower()
    if not url.startswith(("http://", "https://")):
        raise BundleFetchError(f"bundle URL must be http(s)://, got {redact_url(url)!r}")
    if not SHA256_HEX.match(expected):
        raise BundleFetchError(f"expected sha256 must be 64 hex digits, got {sha256!r}")
    dest.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest))
    try:
        archive = scratch / "bundle.tar.gz"
        got = _download_with_retries(url, archive, attempts, timeout_s)
        if got != expected:
            raise BundleFetchError(
                f"sha256 mismatch for {redact_url(url)}: expected {expected}, got {got} "
                "(a different or corrupted archive; nothing was unpacked)"
            )
        size = archive.stat().st_size
        unpacked = _unpack(archive, scratch / "unpacked")
        target = dest / unpacked.name
        if target.exists():
            shutil.rmtree(target)
        unpacked.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("bundle fetched", extra={"bundle": str(target), "sha256": got, "bytes": size})
    return Fetched(target, got, size)
