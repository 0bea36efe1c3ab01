"""What a demo run reports beside the live table: the ranker's read-latency histogram scraped
from its metrics endpoint, the summary JSON's shape, and how far the FM ran behind."""

from __future__ import annotations

import urllib.request
from typing import Any


def scrape_read_latency(port: int, timeout_s: float = 5.0) -> dict[str, Any]:
    """The ranker's ``solaris_read_seconds`` histogram from its metrics endpoint: cumulative
    bucket counts ``[[le_seconds, count], ...]``, ``count`` and ``sum``; empty when unreachable."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, Any] = {"buckets": []}
    for family in text_string_to_metric_families(text):
        if family.name != "solaris_read_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out["buckets"].append([float(sample.labels["le"]), sample.value])
            elif sample.name.endswith("_count"):
                out["count"] = sample.value
            elif sample.name.endswith("_sum"):
                out["sum"] = sample.value
    out["buckets"].sort()
    return out


def summary_json(
    live: dict[str, Any], offline: dict[str, Any] | None, max_lag: int, replay: Any
) -> dict[str, Any]:
    out = dict(live)
    out["max_consumer_lag"] = max_lag
    out["replay"] = {
        "messages": replay.messages,
        "requests": replay.requests,
        "seconds": replay.seconds,
        "rate": replay.rate,
    }
    if offline is not None:
        keys: tuple[str, ...] = ("cumulative", "fm_pairs_per_request", "speculation_precision")
        keys += ("ne", "transfer_ratio_at_achieved", "vs_fair_vm", "eval_impressions")
        out["offline"] = {k: offline[k] for k in keys if k in offline}
    return out


def behind_summary(behind_ms: list[int]) -> dict[str, float]:
    """p50 / p90 / max of the FM's event-time latency during the replay, in seconds."""
    import numpy as np

    if not behind_ms:
        return {}
    arr = np.asarray(behind_ms, np.float64) / 1000.0
    return {
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "max": float(arr.max()),
    }
