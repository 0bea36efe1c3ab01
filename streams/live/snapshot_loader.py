"""The ranker's cold-start index, reloaded off the request path.

A daemon thread polls the workers' KNN snapshots every ``interval_s``; only when a snapshot was
added, removed or rewritten (CRC32 of its bytes) does it decode them, drop foreign ones (another
bundle's version tag or dim) and build a new merged index, which it hands over by one attribute
assignment (atomic under the GIL: a lookup sees the old index or the new one, never a mix).
Before, the ranker read and rebuilt every snapshot on its own thread every 2 s, between requests.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable

from store.errors import StoreError
from store.protocol import FeatureStore
from streams.engine.neighbours import (
    ItemVectors,
    NeighbourConfig,
    NeighbourIndex,
    UserRepresentations,
)
from streams.live.knn_snapshot import decode_snapshot, merged_index, usable_snapshots

log = logging.getLogger(__name__)
Fingerprint = frozenset[tuple[str, int, int]]


class SnapshotLoader:
    """Builds the merged cold-start index when the snapshots change; see the module doc."""

    def __init__(
        self,
        store: FeatureStore,
        items: ItemVectors,
        config: NeighbourConfig,
        version_tag: int | None,
        install: Callable[[NeighbourIndex], None],
        interval_s: float = 2.0,
    ) -> None:
        self.store = store
        self.items = items
        self.config = config
        self.version_tag = version_tag
        self.install = install
        self.interval_s = interval_s
        self.ignored = 0  #: snapshots skipped at the last rebuild (foreign or undecodable)
        self.builds = 0  #: indexes built (a poll with no change builds none)
        self.polls = 0
        self._seen: Fingerprint | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="knn-snapshots", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a bad snapshot or store hiccup must not kill the thread
                log.exception("KNN snapshot reload failed; keeping the current index")
            self._stop.wait(self.interval_s)

    def poll(self) -> bool:
        """Reload once if the snapshots changed; True if a new index was installed."""
        self.polls += 1
        try:
            raw = self.store.read_snapshots()
        except StoreError:
            return False
        fingerprint = frozenset((n, len(b), zlib.crc32(b)) for n, b in raw.items())
        if fingerprint == self._seen:
            return False
        self._seen = fingerprint
        snaps = []
        for blob in raw.values():
            try:
                snaps.append(decode_snapshot(blob))
            except StoreError:
                continue
        mine, foreign = usable_snapshots(snaps, self.version_tag, self.items.dim)
        ignored = len(raw) - len(mine)
        if ignored and ignored != self.ignored:
            log.warning(
                "ignoring KNN snapshots of another bundle or undecodable",
                extra={"ignored": ignored, "foreign": foreign, "version_tag": self.version_tag},
            )
        self.ignored = ignored
        if not mine:
            return False
        reps = UserRepresentations(self.items)
        index, _ = merged_index(mine, reps, self.config, version_tag=self.version_tag)
        self.install(index)
        self.builds += 1
        return True
