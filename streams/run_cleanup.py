"""Delete what one run under its own topic prefix left in Kafka and on disk.

A demo or benchmark run works under a fresh prefix, so its topics, Faust changelogs, consumer
groups and table state are never read again once it has reported. Left in place they pile up in
the broker's data dir, and a broker loads every partition it holds before it answers (~13k
partitions took longer than the 120 s start timeout on a 2-core machine).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from dataclasses import dataclass

from confluent_kafka import KafkaException

from streams.settings import Settings
from streams.topics import admin_client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Cleaned:
    topics: int
    groups: int
    state_dirs: int


def of_run(name: str, prefix: str) -> bool:
    """``name`` is one of the run's: its topics are ``<prefix>.<topic>``, its groups, Faust
    changelogs and state dirs ``<prefix>-<...>`` (a prefix that merely starts another run's
    prefix does not match it)."""
    return name == prefix or name.startswith((f"{prefix}.", f"{prefix}-"))


def delete_run(settings: Settings, prefix: str, timeout_s: float = 30.0) -> Cleaned:
    """Delete the run's topics, consumer groups and Faust state dirs; best effort (what cannot
    be deleted is logged and left). Stop the run's workers first."""
    topics = groups = 0
    admin = admin_client(settings)
    try:
        names = [t for t in admin.list_topics(timeout=timeout_s).topics if of_run(t, prefix)]
        if names:
            for fut in admin.delete_topics(names, operation_timeout=timeout_s).values():
                fut.result()
            topics = len(names)
        listed = admin.list_consumer_groups(request_timeout=timeout_s).result().valid
        ids = [g.group_id for g in listed if of_run(g.group_id, prefix)]
        if ids:
            for fut in admin.delete_consumer_groups(ids, request_timeout=timeout_s).values():
                with contextlib.suppress(KafkaException):  # a group still settling
                    fut.result()
                    groups += 1
    except KafkaException as exc:
        log.warning("cleanup of run %s incomplete: %s", prefix, exc)
    state = list(settings.faust_state_root.glob(f"{prefix}-*"))
    for path in state:
        shutil.rmtree(path, ignore_errors=True)
    return Cleaned(topics, groups, len(state))
