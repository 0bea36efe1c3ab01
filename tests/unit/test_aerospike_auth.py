"""Aerospike user/password and TLS settings reach the client config (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store.aerospike_config import AerospikeAuth, client_config
from store.errors import StoreUnavailable
from streams.settings import Settings
from streams.stores import aerospike_auth, store_from_settings


def test_no_auth_is_the_plain_config() -> None:
    assert client_config("a:3100,b") == {"hosts": [("a", 3100), ("b", 3000)]}


def test_user_password_and_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    auth = AerospikeAuth(user="solaris", password="pw", tls_name="as.cluster", tls_cafile=str(ca))
    assert client_config("a:4333,b:4333", auth) == {
        "hosts": [("a", 4333, "as.cluster"), ("b", 4333, "as.cluster")],
        "user": "solaris",
        "password": "pw",
        "tls": {"enable": True, "cafile": str(ca)},
    }
    assert "pw" not in repr(auth)


def test_tls_without_ca_uses_the_system_store() -> None:
    config = client_config("a:4333", AerospikeAuth(tls_name="as.cluster"))
    assert config == {"hosts": [("a", 4333, "as.cluster")], "tls": {"enable": True}}


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        (AerospikeAuth(user="solaris"), "USER and SOLARIS_AEROSPIKE_PASSWORD go together"),
        (AerospikeAuth(password="pw"), "USER and SOLARIS_AEROSPIKE_PASSWORD go together"),
        (AerospikeAuth(tls_cafile="/etc/hostname"), "needs SOLARIS_AEROSPIKE_TLS_NAME"),
        (AerospikeAuth(tls_name="n", tls_cafile="/no/ca.pem"), "/no/ca.pem is not a readable"),
    ],
)
def test_inconsistent_auth_is_refused(auth: AerospikeAuth, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        client_config("a", auth)


def test_settings_reach_the_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    aerospike = pytest.importorskip("aerospike", reason="the 'aerospike' extra is not installed")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    for name, value in {
        "STORE_BACKEND": "aerospike",
        "AEROSPIKE_HOSTS": "as1:4333",
        "AEROSPIKE_USER": "solaris",
        "AEROSPIKE_PASSWORD": "pw",
        "AEROSPIKE_TLS_NAME": "as.cluster",
        "AEROSPIKE_TLS_CAFILE": str(ca),
    }.items():
        monkeypatch.setenv(f"SOLARIS_{name}", value)
    settings = Settings()
    assert "pw" not in repr(settings) and "pw" not in repr(aerospike_auth(settings))
    seen: list[dict[str, Any]] = []

    def refuse(config: dict[str, Any]) -> Any:
        seen.append(config)
        raise aerospike.exception.ClientError("no server in unit tests")

    monkeypatch.setattr(aerospike, "client", refuse)
    with pytest.raises(StoreUnavailable, match="as1:4333"):
        store_from_settings(settings)
    assert seen == [client_config("as1:4333", aerospike_auth(settings))]
    assert seen[0]["user"] == "solaris" and seen[0]["tls"]["cafile"] == str(ca)
