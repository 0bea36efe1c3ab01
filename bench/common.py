"""What every benchmark shares: machine description, percentiles, the JSON file, Markdown tables.

The machines these run on are small and shared, so absolute numbers move from run to run; each
benchmark therefore measures a floor (or reference) and the thing under test *side by side in one
run* and reports their ratio. The JSON written here is the contract of ``bench/results/*.json``::

    {"bench": name, "machine": {...}, "results": {...}, "ratios": {...}, "targets": {...},
     "provenance": {"commit": ..., "date": ...}}

(the commit and date let a result be committed beside the docs' table it fills).

``ratios`` values are plain floats (or ``None`` when a part was skipped), so dashboards and the
smoke test can read every file the same way.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from models.results import provenance

#: Where `make bench` writes its JSON files (the folder is kept in git by a .gitkeep).
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REQUIRED_KEYS = ("bench", "machine", "results", "ratios")


@dataclass(frozen=True, slots=True)
class Target:
    """A pass/fail goal on one ratio: ``value <= limit`` (``upper``) or ``value >= limit``."""

    limit: float
    upper: bool

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value <= self.limit if self.upper else value >= self.limit

    def text(self) -> str:
        return f"{'≤' if self.upper else '≥'} {self.limit:g}"


@dataclass
class BenchResult:
    """One benchmark's outcome: raw measurements, the ratios that matter, and their targets."""

    bench: str
    machine: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, float | None] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    smoke: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "smoke": self.smoke,
            "machine": self.machine,
            "results": self.results,
            "ratios": self.ratios,
            "targets": {
                k: {"limit": t.limit, "upper": t.upper, "met": t.met(self.ratios.get(k))}
                for k, t in self.targets.items()
            },
            "provenance": provenance(),
        }

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, default=_json_default) + "\n")
        return path

    def ratio_rows(self) -> list[list[str]]:
        """``bench | ratio | value | target | met`` rows for the summary table."""
        rows = []
        for key, value in self.ratios.items():
            target = self.targets.get(key)
            met = target.met(value) if target else None
            rows.append(
                [
                    self.bench,
                    key,
                    "n/a" if value is None else f"{value:.3g}",
                    target.text() if target else "",
                    {True: "yes", False: "**no**", None: ""}[met],
                ]
            )
        return rows


def _json_default(obj: object) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine_info(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Where the numbers came from: CPU, cores, memory, Python, onnxruntime and its providers.

    The load average is included because these machines are shared: a high one explains noise.
    """
    import onnxruntime as ort

    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": ort.__version__,
        "onnxruntime_providers": list(ort.get_available_providers()),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if extra:
        info.update(extra)
    return info


def redis_version(url: str) -> str | None:
    """The Redis server version at ``url`` (None when unreachable)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2.0)
    try:
        return str(client.info("server").get("redis_version"))
    except redis.RedisError:
        return None
    finally:
        client.close()


def percentiles_ms(samples_s: Sequence[float] | np.ndarray) -> dict[str, float]:
    """p50 / p99 / p999 / mean of latencies given in seconds, in milliseconds."""
    arr = np.asarray(samples_s, dtype=np.float64) * 1000.0
    if arr.size == 0:
        return {"n": 0, "p50": 0.0, "p99": 0.0, "p999": 0.0, "mean": 0.0}
    p50, p99, p999 = np.percentile(arr, [50, 99, 99.9])
    return {
        "n": int(arr.size),
        "p50": float(p50),
        "p99": float(p99),
        "p999": float(p999),
        "mean": float(arr.mean()),
    }


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``, or None when either is missing or the denominator is zero."""
    if num is None or den is None or den == 0:
        return None
    return float(num) / float(den)


def run_id(prefix: str = "bench") -> str:
    """A unique prefix for topics, consumer groups and store keys of one benchmark run."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a private server or endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def delete_keys(url: str, prefix: str) -> int:
    """Delete every Redis key under ``prefix:`` (what a benchmark wrote); returns the count."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=10.0)
    n = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=2000):
            batch.append(key)
            if len(batch) >= 2000:
                n += int(client.delete(*batch))
                batch.clear()
        if batch:
            n += int(client.delete(*batch))
    finally:
        client.close()
    return n


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub Markdown table (numbers already formatted by the caller)."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def machine_line(machine: Mapping[str, Any]) -> str:
    """One line describing the machine, printed above every table."""
    provider = machine.get("fm_provider") or ",".join(machine.get("onnxruntime_providers", []))
    return (
        f"{machine.get('cpu')}, {machine.get('cores_usable')}/{machine.get('cores')} cores, "
        f"{machine.get('memory_gib')} GiB, Python {machine.get('python')}, onnxruntime "
        f"{machine.get('onnxruntime')} ({provider}), Redis {machine.get('redis', '?')}, "
        f"load {machine.get('loadavg_1m_at_start')}"
    )


def summary_table(results: Sequence[BenchResult]) -> str:
    """The ratios of every benchmark against their targets, as one Markdown table."""
    rows = [row for r in results for row in r.ratio_rows()]
    return markdown_table(["bench", "ratio", "value", "target", "met"], rows)


def validate_shape(doc: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``doc`` has the result-file shape (used by the smoke test)."""
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise ValueError(f"result lacks {missing}")
    if not isinstance(doc["machine"], dict) or "cpu" not in doc["machine"]:
        raise ValueError("machine must describe the cpu")
    for key, value in doc["ratios"].items():
        if value is not None and not isinstance(value, int | float):
            raise ValueError(f"ratio {key} is {value!r}, not a number")
