"""``python -m bench.profile_threads``: where a worker's threads spend a window of a py-spy profile.

A worker's CPU per event says how much, not where; and a flame graph of a whole run mixes
start-up, warm-up and shutdown with the step that matters. Record the worker for its whole life
with idle samples kept, so that a thread's sample index is its time::

    py-spy record --pid <worker> --idle --rate 100 --nonblocking --format speedscope -o spy.json

then slice the window of the step (counted back from the process's end) and read, per thread,
the share of one core that was not waiting (epoll, locks, queues, sleeps), and for the event
loop thread, that share split by what the engine does (:data:`GROUPS`; the first group whose
frame appears anywhere in a sample's stack gets it).

A thread blocked inside a C call (librdkafka's ``poll``, a socket read in hiredis, a wait in
ONNX Runtime) looks busy here: only Python leaf frames tell waiting from working. The event
loop's figure is the one to trust (its waits are in ``epoll``); for how much of it held the
GIL, record a second time with ``--gil`` and compare.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: leaf frames that mean "waiting", not working
IDLE_LEAVES = (
    "select (selectors",
    "wait (threading",
    "_worker (thread.py",
    "poll (",
    "sleep (",
    "_wait_for_tstate_lock",
    "acquire (",
    "get (queue",
)
#: label -> frame name fragments; the first label with a fragment in a sample's stack wins
GROUPS: dict[str, tuple[str, ...]] = {
    "changelog send (Faust/aiokafka producer)": (
        "on_key_set (",
        "publish_message (",
        "ProducerBuffer.",
        "AIOKafkaClient.send (",
        "_on_published (",
        "set_persisted_offset (",
        "SendProduceReqHandler.",
        "Sender._send_produce_req (",
    ),
    "speculate step": ("speculate_step (",),
    "verify (event loop part)": ("VerifyAgent.",),
    "aggregate agent": ("register.<locals>.on_embeddings (",),
    "history agent": ("register.<locals>.on_impressions (",),
    "message decode": ("AgentContext.decoded (", "AgentContext.admitted ("),
    "Faust consumer and fetch": (
        "Fetcher.",
        "Consumer._drain_messages (",
        "on_message (",
        "Stream._c_aiter (",
        "Stream.take_events (",
    ),
    "agent sends (librdkafka)": ("LibrdkafkaSender.send (", "AgentContext.send ("),
}


@dataclass(frozen=True, slots=True)
class Window:
    """The slice of each thread's samples to read: ``[end - start_s, end - end_s)``."""

    start_s: float
    end_s: float
    rate_hz: float

    @property
    def ticks(self) -> float:
        return (self.start_s - self.end_s) * self.rate_hz

    def of(self, samples: list[list[int]]) -> list[list[int]]:
        first = -int(self.start_s * self.rate_hz)
        last = -int(self.end_s * self.rate_hz)
        return samples[first : last or None]


def frame_names(doc: dict[str, Any]) -> list[str]:
    """``name (file:line)`` of each frame of a speedscope document."""
    return [
        f"{f['name']} ({str(f.get('file', '')).rsplit('/', 1)[-1]}:{f.get('line', '')})"
        for f in doc["shared"]["frames"]
    ]


def is_idle(stack: list[str]) -> bool:
    return not stack or any(k in stack[-1] for k in IDLE_LEAVES)


def group_of(stack: list[str]) -> str:
    for label, fragments in GROUPS.items():
        if any(frag in name for name in stack for frag in fragments):
            return label
    return "other"


#: how py-spy names a process's main thread (the event loop's), by version: "" or "MainThread"
LOOP_THREAD_NAMES = ('""', '"MainThread"')


def summarise(
    doc: dict[str, Any], window: Window, loop_threads: tuple[str, ...] = LOOP_THREAD_NAMES
) -> dict[str, Any]:
    """Busy share of one core per thread, and the event loop thread's split by group (both in
    % of one core over ``window``)."""
    names = frame_names(doc)
    busy: dict[str, float] = {}
    groups: Counter[str] = Counter()
    for profile in doc["profiles"]:
        stacks = [[names[i] for i in s] for s in window.of(profile["samples"])]
        working = [s for s in stacks if not is_idle(s)]
        busy[profile["name"]] = round(100 * len(working) / window.ticks, 1)
        if profile["name"].endswith(loop_threads):
            groups.update(group_of(s) for s in working)
    return {
        "window": {"start_s": window.start_s, "end_s": window.end_s, "rate_hz": window.rate_hz},
        "busy_percent_of_a_core": {k: v for k, v in busy.items() if v >= 0.5},
        "event_loop_percent_of_a_core": {
            k: round(100 * v / window.ticks, 1) for k, v in groups.most_common()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy speedscope file (recorded with --idle)")
    parser.add_argument(
        "--from-end-s", type=float, required=True, help="window start, s before end"
    )
    parser.add_argument("--to-end-s", type=float, default=0.0, help="window end, s before end")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's --rate")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    args = parser.parse_args()
    doc = json.loads(args.profile.read_text())
    out = summarise(doc, Window(args.from_end_s, args.to_end_s, args.rate))
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
