"""Fault matrix: a zombie FM worker, staged live on the shared broker and Redis.

An FM worker is paused (SIGSTOP) while it holds a verified batch it has embedded but not yet
stored; its session expires, a second FM worker takes its partitions, embeds the same batches
from the committed offset and stores them; then the store's pairs move on (here: every pair key
is rewritten one millisecond newer, as the new owner's later embeddings would be). When the
zombie resumes it finishes its old batch and writes it: every one of those writes must be
refused by the store (conditional writes, :mod:`store.conditional_writes`), so no key goes
back to the older value, and each refusal is counted.

The zombie is deterministic, not a race: the paused worker runs with a ``sitecustomize`` that
holds its FM call until a gate file exists and prints what it holds and what it wrote.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import time
import uuid
import zlib
from pathlib import Path

import pytest
import redis

from streams.settings import REPO_ROOT, Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    STATELESS_RANKING,
    TimedReplay,
    fault_pipeline,
    print_measured,
    wait_caught_up,
    wait_for,
)
from tests.integration.live_harness import live_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELD, RELEASED, WROTE = "TEST-ZOMBIE-HELD", "TEST-ZOMBIE-RELEASED", "TEST-ZOMBIE-WROTE"
ZOMBIE_HOOK = f"""
import os, time
from store import keyed_writes as _kw
from streams.engine import embedder as _emb

_GATE = os.environ["TEST_ZOMBIE_GATE"]
_run = _emb.Embedder.run


def _held(self, prepared):
    out = _run(self, prepared)
    if not os.path.exists(_GATE):
        print(f"{HELD} {{len(prepared)}}", flush=True)
        while not os.path.exists(_GATE):
            time.sleep(0.05)
        print("{RELEASED}", flush=True)
    return out


_write = _kw.KeyedWrites.write_pairs


def _logged(self, pairs, ttl_ms):
    before = self.stale_skipped
    _write(self, pairs, ttl_ms)
    print(f"{WROTE} {{len(pairs)}} {{self.stale_skipped - before}}", flush=True)


_emb.Embedder.run = _held
_kw.KeyedWrites.write_pairs = _logged
"""


def one_ms_newer(raw: bytes) -> bytes:
    """The same pair value with its header event time (bytes 4..11) one ms later, resealed."""
    body = bytearray(raw[:-4])
    (t,) = struct.unpack_from("<q", body, 4)
    struct.pack_into("<q", body, 4, t + 1)
    return bytes(body) + struct.pack("<I", zlib.crc32(body))


def test_a_resumed_zombie_fm_worker_never_writes_back_older_pairs(
    traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    from store.values import decode_vector

    base = Settings()
    require_kafka_and_redis(base)
    settings = live_settings(base, uuid.uuid4().hex[:10], bundle, **STATELESS_RANKING)
    hook = tmp_path / "zombie-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(ZOMBIE_HOOK)
    gate = tmp_path / "gate"
    zombie_env = {
        "PYTHONPATH": f"{hook}{os.pathsep}{REPO_ROOT}",
        "TEST_ZOMBIE_GATE": str(gate),
    }
    client = redis.Redis.from_url(settings.store_url, socket_timeout=5)
    with fault_pipeline(settings, tmp_path, fm_env=zombie_env) as procs:
        replay = TimedReplay(settings, traffic_faults, TimedReplay.speed_for(traffic_faults, 15))
        replay.start()
        wait_for("the FM worker to hold a batch", lambda: HELD in procs.log("fm"), 120)
        zombie = procs.procs["fm"]
        os.killpg(zombie.pid, signal.SIGSTOP)
        try:
            procs.start("fm2", "worker", "--agents", "embed")
            replay.join()
            wait_caught_up(settings, procs, timeout_s=240)  # fm2 has stored every batch
            keys = list(client.scan_iter(match=f"{settings.key_prefix}:*:p:*", count=1000))
            newer = {k: one_ms_newer(client.get(k)) for k in keys}
            for k, v in newer.items():
                decode_vector(v)  # still a valid value
                client.set(k, v, keepttl=True)
            gate.touch()
        finally:
            os.killpg(zombie.pid, signal.SIGCONT)
        wait_for("the zombie to write its old batch", lambda: WROTE in procs.log("fm"), 120)
        # it may go on with batches it had fetched before it learns its partitions are gone
        time.sleep(3)
        log = procs.log("fm")
    client_values = {k: client.get(k) for k in newer}
    client.close()
    # Faust's worker logs the hook's prints ("... TEST-ZOMBIE-WROTE 12 12 [mode.redirect]")
    wrote = [(int(n), int(s)) for n, s in re.findall(rf"{WROTE} (\d+) (\d+)", log)]
    written = sum(n for n, _ in wrote)
    skipped = sum(s for _, s in wrote)
    went_back = [k for k, v in newer.items() if client_values[k] != v]
    print_measured(
        "zombie FM worker",
        {
            "pair_keys": len(newer),
            "zombie_held_pairs": int(re.findall(rf"{HELD} (\d+)", log)[0]),
            "zombie_wrote": written,
            "refused_as_older": skipped,
            "keys_gone_back": len(went_back),
        },
    )
    assert RELEASED in log and written > 0, "the zombie did not write its old batch"
    assert not went_back, f"{len(went_back)} keys went back to the zombie's older value"
    assert skipped == written  # every write of the old batch refused, and counted
