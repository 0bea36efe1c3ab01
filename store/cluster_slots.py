"""Which Redis Cluster slot (and node) each key of a read or write belongs to.

Every key of a user carries the hash tag ``{u<user>}`` (:mod:`store.keys`), so one user's keys
share a slot; a read groups its keys by slot (one ``MGET`` each) and a write its items by the
primary that owns their slot (one packed send each).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from operator import itemgetter

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from store.keys import KeyLayout
from store.protocol import ReadBatch


def batch_slots(layout: KeyLayout, batch: ReadBatch) -> list[int]:
    """The cluster slot of every key of :func:`store.keys.read_keys`, in the same order.

    Every key of a user carries the hash tag ``{u<user>}`` (see :mod:`store.keys`), so the slot
    is computed once per user instead of once per key (CRC16 in Python: ~1 us a key, 500 keys
    a request).
    """
    cache: dict[int, int] = {}

    def slot(user: int) -> int:
        found = cache.get(user)
        if found is None:
            found = cache[user] = key_slot(layout.user_tag(user).encode())
        return found

    slots: list[int] = []
    for user, run in groupby(batch.pairs, key=itemgetter(0)):
        slots.extend([slot(user)] * sum(1 for _ in run))
    slots.extend(slot(u) for u in batch.aggregates)
    slots.extend(slot(u) for u in batch.neighbours)
    slots.extend(slot(u) for u in batch.histories)
    slots.extend(slot(u) for u in batch.states)
    return slots


def group_by_slot(slots: Sequence[int]) -> dict[int, list[int]]:
    """Indices by slot (``slots[i]`` is key i's slot); slots and indices in first-seen order."""
    groups: dict[int, list[int]] = {}
    for i, slot in enumerate(slots):
        groups.setdefault(slot, []).append(i)
    return groups


def group_by_node(
    client: RedisCluster, items: list[tuple[bytes, bytes]]
) -> list[tuple[ClusterNode, list[tuple[bytes, bytes]]]]:
    """``items`` grouped by the primary owning their key's slot (client's slot table)."""
    by_slot: dict[int, list[tuple[bytes, bytes]]] = {}
    for item in items:
        by_slot.setdefault(key_slot(item[0]), []).append(item)
    by_node: dict[str, tuple[ClusterNode, list[tuple[bytes, bytes]]]] = {}
    for slot, part in by_slot.items():
        node = client.nodes_manager.get_node_from_slot(slot)
        by_node.setdefault(node.name, (node, []))[1].extend(part)
    return list(by_node.values())
