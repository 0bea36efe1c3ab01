"""The producer factory partitions keys like Faust (murmur2), never like librdkafka's default."""

from __future__ import annotations

import pytest

from streams.kafka_clients import FAUST_PARTITIONER, partition_for, producer_config
from streams.settings import Settings

#: Java client's ``Utils.murmur2`` of these keys (Kafka's own UtilsTest), signed 32-bit.
JAVA_MURMUR2 = {
    b"21": -973_932_308,
    b"foobar": -790_332_482,
    b"a-little-bit-long-string": -985_981_536,
    b"a-little-bit-longer-string": -1_486_304_829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58_897_971,
    b"abc": 479_470_107,
}


@pytest.mark.parametrize("partitions", [1, 2, 4, 7, 12])
def test_partition_for_matches_the_java_client(partitions: int) -> None:
    for key, signed in JAVA_MURMUR2.items():
        assert partition_for(key, partitions) == (signed & 0x7FFFFFFF) % partitions


def test_partition_for_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for(b"1", 0)


def test_producer_config_always_uses_faust_partitioner() -> None:
    config = producer_config(Settings(), {"linger.ms": 5})
    assert config["partitioner"] == FAUST_PARTITIONER == "murmur2_random"
    assert config["linger.ms"] == 5


def test_producer_config_refuses_another_partitioner() -> None:
    with pytest.raises(ValueError, match="murmur2_random"):
        producer_config(Settings(), {"partitioner": "consistent_random"})
