"""Fault matrix, broker faults: the test's own broker stopped mid-replay and restarted.

A timed replay (several requests in flight in every stage) runs against a broker this module
starts with ``infra/kafka.sh`` on free ports and its own data dir (the shared broker is never
touched). Once the pipeline has embedded part of the traffic, the broker is stopped — with
SIGTERM (a controlled shutdown) or with kill -9 — kept down for a few seconds and restarted on
the same data dir. After the replay, the pipeline must catch up with nothing lost (see
:func:`tests.integration.fault_harness.check_nothing_lost`): every verified pair in Redis and in
the ``embeddings`` topic, aggregates equal to the ones folded from the run's own embeddings and
to the simulator's counts, and the simulator's set of verified pairs.

A third test keeps the broker away for longer than the workers' producer may take to deliver
a message (``SOLARIS_PRODUCER_MESSAGE_TIMEOUT_MS``, shortened here): the FM worker holds an
embedded batch (a test hook) while the broker is killed, then sends it into the outage, so its
deliveries fail for certain. The batch must be run again, not acked undelivered.

A fourth cuts one of the verify agent's batches in two: its first ``verified`` message is
delivered, then the broker is killed and the rest of the batch is sent into the outage. The
retry runs the whole batch again and sends the delivered message a second time, marked as the
retry's (at-least-once); no request may be verified again by a first try (lost ledger state).
Under load a batch can straddle a broker outage on its own: this is that case, staged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.live.stats import read_stats
from streams.settings import REPO_ROOT, Settings
from tests.conftest import require_kafka_and_redis
from tests.integration.fault_harness import (
    STATELESS_RANKING,
    TimedReplay,
    fault_pipeline,
    hook_env,
    pair_keys,
    print_measured,
    replay_until_pairs,
    wait_caught_up,
    wait_for,
)
from tests.integration.live_harness import live_settings
from tests.integration.nothing_lost import check_nothing_lost
from tests.integration.pid_files import checked_pid
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
#: the replay plays the traffic's requests in about this many wall seconds
REPLAY_WALL_S = 30.0
#: pairs in Redis before the fault: the pipeline is well into the replay, not starting up
PAIRS_BEFORE_FAULT = 150
#: how long the broker stays away (longer than a Faust commit interval and a client retry)
DOWN_S = 5.0


@dataclass
class OwnBroker:
    """A broker of this test module: ``infra/kafka.sh`` with its own ports and data dir."""

    data_dir: Path
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _script(self, command: str) -> None:
        env = os.environ | {
            "SOLARIS_KAFKA_PORT": str(self.port),
            "SOLARIS_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "SOLARIS_KAFKA_DATA_DIR": str(self.data_dir),
            "SOLARIS_KAFKA_HEAP": "512m",
            "SOLARIS_PYTHON": sys.executable,
        }
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "infra" / "kafka.sh"), command],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        if done.returncode:
            raise RuntimeError(f"kafka.sh {command} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> float:
        """Start (or restart on the same data) and wait until it answers; returns seconds."""
        t0 = time.monotonic()
        self._script("start")
        return time.monotonic() - t0

    def stop(self) -> None:
        """SIGTERM and wait for the controlled shutdown (the script escalates after 30 s)."""
        self._script("stop")

    def kill9(self) -> None:
        pid = checked_pid(self.data_dir / "kafka.pid", "kafka.Kafka")
        os.kill(pid, signal.SIGKILL)
        wait_for("the killed broker to exit", lambda: not _alive(pid), timeout_s=30)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    require_kafka_and_redis(Settings())  # Redis is the shared one; the jars come with Kafka's
    broker = OwnBroker(tmp_path_factory.mktemp("own-kafka"), free_port(), free_port())
    try:
        broker.start()
    except RuntimeError as exc:
        pytest.skip(f"cannot start a second local broker: {exc}")
    try:
        yield broker
    finally:
        broker.stop()


#: the workers' producer gives up a delivery after this long in the message-timeout test
MESSAGE_TIMEOUT_MS = 2_000
#: and the broker stays away this long (several message timeouts, several batch retries)
LONG_DOWN_S = 12.0
HELD, RELEASED = "TEST-HOLD-HELD", "TEST-HOLD-RELEASED"
#: the FM worker's next FM call after ``TEST_HOLD_ARM`` appears waits until ``TEST_HOLD_GATE``
#: exists (once): the test kills the broker in between, so the batch's sends meet the outage
HOLD_HOOK = f"""
import os, time
from streams.engine import embedder as _emb

_ARM, _GATE = os.environ["TEST_HOLD_ARM"], os.environ["TEST_HOLD_GATE"]
_run = _emb.Embedder.run
_held = []


def _hold(self, prepared):
    out = _run(self, prepared)
    if not _held and os.path.exists(_ARM):
        _held.append(1)
        print("{HELD}", flush=True)
        while not os.path.exists(_GATE):
            time.sleep(0.05)
        print("{RELEASED}", flush=True)
    return out


_emb.Embedder.run = _hold
"""


#: the pipeline worker's verify agent, at its first batch with two or more ``verified`` messages
#: after ``TEST_CUT_ARM`` appears, sends the first, waits for its delivery, then waits until
#: ``TEST_CUT_GATE`` exists (once) before sending the rest: the test kills the broker between
CUT_HOOK = f"""
import asyncio, os
from streams.live.agents import verify as _verify

_ARM, _GATE = os.environ["TEST_CUT_ARM"], os.environ["TEST_CUT_GATE"]
_orig = _verify.VerifyAgent._send_then_save
_held = []


class _CutSender:
    def __init__(self, sender):
        self.sender, self.sent = sender, 0

    async def send(self, topic, key, value, timestamp_ms):
        fut = await self.sender.send(topic, key, value, timestamp_ms)
        self.sent += 1
        if self.sent == 1:
            await fut
            print("{HELD}", flush=True)
            while not os.path.exists(_GATE):
                await asyncio.sleep(0.05)
            print("{RELEASED}", flush=True)
        return fut


async def _cut(self, decoded, results, encoded):
    if _held or not os.path.exists(_ARM) or sum(e is not None for e in encoded) < 2:
        return await _orig(self, decoded, results, encoded)
    _held.append(1)
    sender = self.ctx.sender
    self.ctx.sender = _CutSender(sender)
    try:
        return await _orig(self, decoded, results, encoded)
    finally:
        self.ctx.sender = sender


_verify.VerifyAgent._send_then_save = _cut
"""


def _run_with_broker_fault(
    broker: OwnBroker,
    stop: Callable[[], None],
    traffic: Path,
    bundle: Path,
    log_dir: Path,
) -> tuple[Settings, dict[str, Any]]:
    settings = live_settings(
        Settings(),
        uuid.uuid4().hex[:10],
        bundle,
        kafka_bootstrap=broker.bootstrap,
        **STATELESS_RANKING,
    )
    with fault_pipeline(settings, log_dir) as procs:
        replay = TimedReplay(settings, traffic, TimedReplay.speed_for(traffic, REPLAY_WALL_S))
        replay.start()
        wait_for(
            f"{PAIRS_BEFORE_FAULT} pairs embedded",
            lambda: pair_keys(settings) >= PAIRS_BEFORE_FAULT,
            timeout_s=180,
        )
        at_fault, t_fault = pair_keys(settings), time.monotonic() - replay.started_at
        down = time.monotonic()
        stop()
        time.sleep(DOWN_S)
        procs.alive()  # the workers ride out the outage
        restart_s = broker.start()
        outage_s = time.monotonic() - down
        up = time.monotonic()
        stats = replay.join()
        assert replay.running is False and stats.requests > 0
        recovery_s = wait_caught_up(settings, procs)
        caught_up_s = time.monotonic() - up
        procs.alive()
        time.sleep(1.5)  # the workers publish their counters once a second
        logs = {name: procs.log(name) for name in ("pipeline", "fm")}
    counters = read_stats(settings)["pipeline"]
    return settings, {
        "requests": stats.requests,
        "pairs_at_fault": at_fault,
        "fault_at_s": t_fault,
        "outage_s": outage_s,
        "restart_s": restart_s,
        "caught_up_after_restart_s": caught_up_s,
        "drain_after_replay_s": recovery_s,
        "skipped_redelivered_requests": int(counters.get("redelivered", 0)),
        **{f"{name}_{k}": n for name, log in logs.items() for k, n in worker_events(log).items()},
    }


def worker_events(log: str) -> dict[str, int]:
    """What a worker's log says it went through: batches run again after an infrastructure
    error, and consumer group rebalances after its first join (each revokes its partitions)."""
    return {
        "batch_retries": log.count("retrying the whole batch"),
        "rebalances": max(0, log.count("Revoking previously assigned partitions") - 1),
    }


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_broker_stopped_mid_replay_and_restarted_loses_nothing(
    how: str,
    own_broker: OwnBroker,
    traffic_faults: Path,
    bundle: Path,
    tmp_path: Path,
) -> None:
    stop = own_broker.stop if how == "sigterm" else own_broker.kill9
    settings, measured = _run_with_broker_fault(own_broker, stop, traffic_faults, bundle, tmp_path)
    report = check_nothing_lost(settings, traffic_faults, bundle)
    measured |= {
        "verified_pairs": report.verified,
        "verified_twice": report.verified_duplicates,
        "verified_resent_by_retry": report.verified_resent,
        "embedded_twice": report.embedding_duplicates,
        "aggregates": report.aggregates,
    }
    print_measured(f"broker {how}", measured)
    report.assert_nothing_lost(context=str(measured))


def short_timeout_settings(broker: OwnBroker, bundle: Path, **extra: Any) -> Settings:
    """A run on ``broker`` whose deliveries fail after :data:`MESSAGE_TIMEOUT_MS` and whose
    batches are retried long enough to outlast the outage."""
    return live_settings(
        Settings(),
        uuid.uuid4().hex[:10],
        bundle,
        kafka_bootstrap=broker.bootstrap,
        producer_message_timeout_ms=MESSAGE_TIMEOUT_MS,
        agent_batch_attempts=12,
        agent_batch_max_backoff_s=4.0,
        **STATELESS_RANKING,
        **extra,
    )


def test_broker_away_past_the_message_timeout_loses_no_batch(
    own_broker: OwnBroker, traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    settings = short_timeout_settings(own_broker, bundle)
    arm, gate = tmp_path / "arm", tmp_path / "gate"
    fm_env = hook_env(
        tmp_path, "hold-hook", HOLD_HOOK, TEST_HOLD_ARM=str(arm), TEST_HOLD_GATE=str(gate)
    )
    with fault_pipeline(settings, tmp_path, fm_env=fm_env) as procs:
        replay = replay_until_pairs(settings, traffic_faults, PAIRS_BEFORE_FAULT)
        arm.touch()
        wait_for("the FM worker to hold a batch", lambda: HELD in procs.log("fm"), 60)
        down = time.monotonic()
        own_broker.kill9()
        gate.touch()  # the held batch now sends into the outage
        wait_for(
            "a failed delivery to be retried",
            lambda: "retrying the whole batch" in procs.log("fm"),
            timeout_s=LONG_DOWN_S + 30,
        )
        time.sleep(max(0.0, LONG_DOWN_S - (time.monotonic() - down)))
        procs.alive()  # the workers ride out the outage
        restart_s = own_broker.start()
        outage_s = time.monotonic() - down
        stats = replay.join()
        drain_s = wait_caught_up(settings, procs)
        procs.alive()
        log = procs.log("fm")
    report = check_nothing_lost(settings, traffic_faults, bundle)
    print_measured(
        "broker away past the message timeout",
        {
            "requests": stats.requests,
            "message_timeout_ms": MESSAGE_TIMEOUT_MS,
            "outage_s": outage_s,
            "restart_s": restart_s,
            "fm_batch_retries": log.count("retrying the whole batch"),
            "drain_after_replay_s": drain_s,
            "verified_pairs": report.verified,
            "verified_twice": report.verified_duplicates,
            "verified_resent_by_retry": report.verified_resent,
            "embedded_twice": report.embedding_duplicates,
        },
    )
    assert RELEASED in log
    assert "DeliveryFailed" in log, "no delivery failed: the outage did not outlast the timeout"
    report.assert_nothing_lost()


# Runs in make test's serial phase: in 2 of 3 loaded clean-clone runs, the xdist worker running
# it died without a trace (no traceback, no faulthandler output, no OOM) while another process
# ran test_faults_workers.py's kill -9 tests; alone it passed every time. Cause not found.
@pytest.mark.alone
def test_verify_batch_cut_by_the_outage_is_resent_not_verified_again(
    own_broker: OwnBroker, traffic_faults: Path, bundle: Path, tmp_path: Path
) -> None:
    # batches of several requests, so that one can be cut in two
    settings = short_timeout_settings(own_broker, bundle, agent_batch_max_wait_ms=300)
    arm, gate = tmp_path / "arm", tmp_path / "gate"
    env = hook_env(tmp_path, "cut-hook", CUT_HOOK, TEST_CUT_ARM=str(arm), TEST_CUT_GATE=str(gate))
    with fault_pipeline(settings, tmp_path, pipeline_env=env) as procs:
        replay = replay_until_pairs(settings, traffic_faults, PAIRS_BEFORE_FAULT)
        arm.touch()
        wait_for("the verify agent to cut a batch", lambda: HELD in procs.log("pipeline"), 60)
        down = time.monotonic()
        own_broker.kill9()
        gate.touch()  # the rest of the batch now goes into the outage
        wait_for(
            "the cut batch to be retried",
            lambda: "agent verify batch failed" in procs.log("pipeline"),
            timeout_s=LONG_DOWN_S + 30,
        )
        procs.alive()
        restart_s = own_broker.start()
        outage_s = time.monotonic() - down
        stats = replay.join()
        drain_s = wait_caught_up(settings, procs)
        procs.alive()
        log = procs.log("pipeline")
    report = check_nothing_lost(settings, traffic_faults, bundle)
    print_measured(
        "verify batch cut by a broker outage",
        {
            "requests": stats.requests,
            "outage_s": outage_s,
            "restart_s": restart_s,
            "pipeline_batch_retries": log.count("retrying the whole batch"),
            "drain_after_replay_s": drain_s,
            "verified_pairs": report.verified,
            "verified_twice": report.verified_duplicates,
            "verified_resent_by_retry": report.verified_resent,
            "embedded_twice": report.embedding_duplicates,
        },
    )
    assert RELEASED in log
    assert report.verified_resent > 0, "the retry did not send the delivered message again"
    report.assert_nothing_lost()
