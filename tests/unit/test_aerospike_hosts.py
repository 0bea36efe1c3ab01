from __future__ import annotations

import pytest

from store.aerospike_config import parse_hosts


def test_parse_hosts_defaults_port() -> None:
    assert parse_hosts("a:3100, b") == [("a", 3100), ("b", 3000)]


def test_parse_hosts_rejects_empty() -> None:
    with pytest.raises(ValueError, match="no Aerospike hosts"):
        parse_hosts(" , ")
