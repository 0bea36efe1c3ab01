"""Per-message cost of the wire codec: private ids vs a schema registry's ids (issue 25 item 3).

``python -m bench.codec_registry [--url URL] [--n N]`` prints, per record type, the encode and
decode time of one message for the private-id codec and the registry-backed codec (same
:class:`schemas.codec.Codec`, schemas from :class:`schemas.remote_registry.RemoteSchemas`), and
with ``--url`` (a running registry, e.g. ``infra/schema_registry.sh url``) confluent-kafka's own
``AvroSerializer`` / ``AvroDeserializer`` for reference. Without ``--url`` the registry is an
in-memory stand-in: after the startup neither codec makes a registry call per message, so the
hot path measured is the same. Best of 5 rounds of ``N`` messages each. ``--json PATH`` also
writes the figures (``results[topic][codec]``) in the benchmarks' JSON layout with the commit.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from bench.common import BenchResult, machine_info
from schemas.codec import Codec, _fields
from schemas.records import EmbeddingBatch, ProposalBatch, RequestEvent
from schemas.remote_registry import RemoteSchemas
from streams.codecs import subjects
from streams.settings import Settings

T0 = 1_700_000_000_000


class MemoryRegistry:
    """In-process stand-in: one id per schema text, versions per subject."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.subjects: dict[str, list[str]] = {}

    def lookup_schema(self, subject_name: str, schema: Schema) -> RegisteredSchema:
        if schema.schema_str not in self.subjects.get(subject_name, []):
            raise SchemaRegistryError(404, 40403, "not found")
        sid = self.ids[schema.schema_str]
        return RegisteredSchema(
            subject=subject_name, version=1, schema_id=sid, guid=None, schema=schema
        )

    def test_compatibility(self, subject_name: str, schema: Schema) -> bool:
        raise SchemaRegistryError(404, 40401, "no subject")

    def register_schema(self, subject_name: str, schema: Schema) -> int:
        self.subjects.setdefault(subject_name, []).append(schema.schema_str)
        return self.ids.setdefault(schema.schema_str, 1000 + len(self.ids))

    def get_schema(self, schema_id: int) -> Schema:
        raise SchemaRegistryError(404, 40403, "not found")


def samples() -> dict[str, Any]:
    """Typical messages: a 50-candidate request, a verified batch with a 50-item history, and
    the embeddings of 14 pairs at d = 64 (float16)."""
    items = tuple(range(14))
    return {
        "requests": RequestEvent("req-000001", 42, T0, "feed", tuple(range(1000, 1050))),
        "verified": ProposalBatch(
            "req-000001",
            42,
            T0,
            50,
            items,
            ("candidates",) * 14,
            tuple(0.5 for _ in items),
            tuple(range(50)),
            (1, 0) * 25,
            tuple(T0 - 1000 * i for i in range(50, 0, -1)),
        ),
        "embeddings": EmbeddingBatch(
            "req-000001",
            42,
            T0,
            "fm-1",
            "FLOAT16",
            64,
            items,
            np.ones((14, 64), np.float16).tobytes(),
        ),
    }


def per_message_us(fn: Callable[[], Any], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


def _as_dict(record: Any, _ctx: Any = None) -> dict[str, Any]:
    return {name: getattr(record, name) for name in _fields(type(record))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="a running schema registry (ccompat URL)")
    parser.add_argument("--n", type=int, default=5000, help="messages per round")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    settings = Settings(topic_prefix="bench-codec", schema_registry_url=args.url)
    client: Any = SchemaRegistryClient({"url": args.url}) if args.url else MemoryRegistry()
    private = Codec()
    registry = Codec(schemas=RemoteSchemas(client, subjects(settings)))
    print(f"| topic | codec | encode µs/msg | decode µs/msg | bytes |  (n={args.n}, best of 5)")
    print("|---|---|---|---|---|")
    results: dict[str, dict[str, dict[str, float]]] = {}
    for topic, rec in samples().items():
        rows: list[tuple[str, Callable[[], bytes], Callable[[bytes], Any]]] = [
            ("private ids", partial(private.encode, rec), private.decode),
            ("registry ids", partial(registry.encode, rec), registry.decode),
        ]
        if args.url:
            ctx = SerializationContext(settings.topic(topic), MessageField.VALUE)
            latest = client.get_latest_version(f"{settings.topic(topic)}-value")
            ser = AvroSerializer(
                client, latest.schema.schema_str, _as_dict, {"auto.register.schemas": False}
            )
            de = AvroDeserializer(client)
            rows.append(
                ("confluent Avro(De)Serializer", partial(ser, rec, ctx), partial(de, ctx=ctx))
            )
        for name, enc, dec in rows:
            data = enc()
            e_us = per_message_us(enc, args.n)
            d_us = per_message_us(partial(dec, data), args.n)
            print(f"| {topic} | {name} | {e_us:.1f} | {d_us:.1f} | {len(data)} |")
            results.setdefault(topic, {})[name] = {
                "encode_us": round(e_us, 2),
                "decode_us": round(d_us, 2),
                "bytes": len(data),
            }
    if args.url:
        client.close()
    if args.json is not None:
        extra = {"registry": "running" if args.url else "in-memory stand-in", "n": args.n}
        result = BenchResult("codec_registry", machine_info(extra), results)
        print(f"wrote {result.write(args.json)}")


if __name__ == "__main__":
    main()
