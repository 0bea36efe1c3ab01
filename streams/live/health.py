"""Liveness and readiness for workers and the ranker (``/healthz``, ``/readyz``).

Live = the process answers. Ready = it can do its job now: partitions assigned, no rebalance
or table recovery in progress (workers), the store reachable. Each check reports a reason, so
``/readyz`` says *why* a process is not ready. Endpoints bind ``SOLARIS_BIND_HOST``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)
Check = Callable[[], dict[str, bool]]


def readiness(checks: dict[str, bool]) -> tuple[int, dict[str, object]]:
    """HTTP status and body of ``/readyz`` for named checks (all must pass)."""
    ready = all(checks.values())
    body = {
        "ready": ready,
        "checks": checks,
        "failing": sorted(k for k, v in checks.items() if not v),
    }
    return (200 if ready else 503), body


class HealthServer:
    """A tiny HTTP server in a daemon thread (the ranker has no web framework of its own)."""

    def __init__(self, host: str, port: int, check: Check) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body: dict[str, object]
                if self.path.rstrip("/") == "/healthz":
                    status, body = 200, {"live": True}
                elif self.path.rstrip("/") == "/readyz":
                    status, body = readiness(outer.safe_check())
                else:
                    status, body = 404, {"error": "not found"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt: str, *args: object) -> None:
                return  # probes every few seconds: not worth a log line each

        self.check = check
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def safe_check(self) -> dict[str, bool]:
        try:
            return self.check()
        except Exception as exc:  # a failing check means "not ready", never a crashed probe
            log.warning("readiness check failed", extra={"error": repr(exc)})
            return {"check": False}

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
