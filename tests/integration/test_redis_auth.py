"""The store on a Redis that demands credentials: ``requirepass``, an ACL user, and TLS.

Our own ``redis-server`` (own ports, own temp dir; the shared Redis is never touched) with a
default-user password, an ACL user ``solaris`` allowed only the test's key prefix, a plain
port and a TLS port (certificates made with openssl). The store is built the way the CLI builds
it, from ``Settings.store_url`` (``redis://user:password@host:port/0``, ``rediss://...``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from store.errors import StoreRefused, StoreUnavailable
from store.protocol import FeatureStore, ReadBatch
from store.values import encode_pair
from streams.settings import Settings
from streams.stores import store_from_settings
from tests.contract.store_contract import pair
from tests.ports import free_port
from tests.tls_certs import TlsFiles, make_tls_files, openssl_available

pytestmark = pytest.mark.integration

USER_PASSWORD = "user-" + uuid.uuid4().hex
DEFAULT_PASSWORD = "default-" + uuid.uuid4().hex


@dataclass(frozen=True)
class AuthRedis:
    port: int
    tls_port: int | None  #: None when this redis-server has no TLS support
    prefix: str  #: the only key prefix the ACL user may touch
    tls: TlsFiles | None


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(["redis-server", *args], stdout=out, stderr=subprocess.STDOUT)


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    client = redis.Redis(port=port, password=DEFAULT_PASSWORD, socket_timeout=1)
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError(f"redis-server did not answer on {port}: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def auth_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not found")
    directory = tmp_path_factory.mktemp("redis-auth")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    base = ["--bind", "127.0.0.1", "--port", str(free_port()), "--dir", str(directory)]
    base += ["--save", "", "--appendonly", "no", "--requirepass", DEFAULT_PASSWORD]
    base += ["--user", "solaris", "on", f">{USER_PASSWORD}", f"~{prefix}:*", "+@all"]
    port = int(base[3])
    tls = make_tls_files(directory / "tls") if openssl_available() else None
    proc, tls_port = None, None
    if tls is not None:
        tls_port = free_port()
        tls_args = ["--tls-port", str(tls_port), "--tls-cert-file", str(tls.cert)]
        tls_args += ["--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca)]
        tls_args += ["--tls-auth-clients", "no"]
        proc = _start(base + tls_args, directory / "redis.log")
        if not _wait_ready(proc, port, directory / "redis.log"):
            proc, tls_port = None, None  # no TLS in this build: run without it
    if proc is None:
        proc = _start(base, directory / "redis-plain.log")
        assert _wait_ready(proc, port, directory / "redis-plain.log"), "redis-server exited"
    try:
        yield AuthRedis(port=port, tls_port=tls_port, prefix=prefix, tls=tls)
    finally:
        _stop(proc)


def _store(url: str, prefix: str) -> FeatureStore:
    return store_from_settings(Settings(store_backend="redis", store_url=url, key_prefix=prefix))


def _round_trip(store: FeatureStore) -> None:
    record = pair(7, 70)
    store.write_pairs([record], ttl_ms=60_000)
    result = store.read(ReadBatch(pairs=[(7, 70), (7, 71)]), timeout_ms=2_000)
    assert result.pairs == [encode_pair(record), None]


def test_acl_user_in_the_url_reads_and_writes(auth_redis: AuthRedis) -> None:
    url = f"redis://solaris:{USER_PASSWORD}@127.0.0.1:{auth_redis.port}/0"
    _round_trip(_store(url, auth_redis.prefix))
    # it really is the ACL user: keys outside its pattern are refused (NOPERM)
    with pytest.raises(StoreRefused, match=r"(?i)perm"):  # refused: not retried in place
        _store(url, "other").write_pairs([pair(1, 1)], ttl_ms=60_000)


def test_requirepass_in_the_url(auth_redis: AuthRedis) -> None:
    url = f"redis://:{DEFAULT_PASSWORD}@127.0.0.1:{auth_redis.port}/0"
    _round_trip(_store(url, auth_redis.prefix))


@pytest.mark.parametrize(
    "credentials", ["", "solaris:wrong@", ":wrong@"], ids=["none", "wrong-user-pw", "wrong-pw"]
)
def test_missing_or_wrong_password_is_refused(auth_redis: AuthRedis, credentials: str) -> None:
    url = f"redis://{credentials}127.0.0.1:{auth_redis.port}/0"
    with pytest.raises(StoreUnavailable, match=r"(?i)auth|password|WRONGPASS"):
        _store(url, auth_redis.prefix).write_pairs([pair(1, 1)], ttl_ms=60_000)


def test_tls_with_credentials(auth_redis: AuthRedis) -> None:
    if auth_redis.tls_port is None or auth_redis.tls is None:
        pytest.skip("openssl missing or this redis-server was built without TLS (--tls-port)")
    host = f"127.0.0.1:{auth_redis.tls_port}"
    url = f"rediss://solaris:{USER_PASSWORD}@{host}/0?ssl_ca_certs={auth_redis.tls.ca}"
    _round_trip(_store(url, auth_redis.prefix))
    # the server certificate is verified: without our CA the handshake fails
    with pytest.raises(StoreUnavailable, match=r"(?i)certificate"):
        no_ca = f"rediss://solaris:{USER_PASSWORD}@{host}/0"
        _store(no_ca, auth_redis.prefix).write_pairs([pair(1, 1)], ttl_ms=60_000)
    # and a plaintext client gets nothing from the TLS port
    with pytest.raises(StoreUnavailable):
        plain = f"redis://solaris:{USER_PASSWORD}@{host}/0"
        _store(plain, auth_redis.prefix).write_pairs([pair(1, 1)], ttl_ms=60_000)
