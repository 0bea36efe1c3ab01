"""Kafka credentials: the librdkafka fragment, Faust's broker_credentials, validation, secrecy,
and that every confluent-kafka client in streams/ and bench/ is built through kafka_clients."""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

import faust
import pytest
from confluent_kafka import Producer
from faust.types.auth import AuthProtocol

from streams.kafka_clients import client_config, consumer_config, producer_config
from streams.kafka_security import (
    KafkaSecurityError,
    check_kafka_security,
    faust_credentials,
    librdkafka_security,
)
from streams.settings import REPO_ROOT, Settings
from tests.tls_certs import TlsFiles

SECRET = "s3cret-Pa55"


def sasl_ssl(tls: TlsFiles, **extra: Any) -> Settings:
    fields: dict[str, Any] = {
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-256",
        "kafka_sasl_username": "solaris",
        "kafka_sasl_password": SECRET,
        "kafka_ssl_cafile": tls.ca,
    }
    fields.update(extra)
    return Settings(**fields)


def test_plaintext_adds_nothing() -> None:
    assert librdkafka_security(Settings()) == {}
    assert faust_credentials(Settings()) is None
    assert client_config(Settings()) == {"bootstrap.servers": Settings().kafka_bootstrap}


def test_sasl_ssl_fragment_reaches_every_client_config(tls: TlsFiles) -> None:
    settings = sasl_ssl(tls)
    expected = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "solaris",
        "sasl.password": SECRET,
        "ssl.ca.location": str(tls.ca),
    }
    assert librdkafka_security(settings) == expected
    for config in (
        producer_config(settings),
        consumer_config(settings, "g"),
        client_config(settings, {"socket.timeout.ms": 1}),
    ):
        assert expected.items() <= config.items()
    # librdkafka itself accepts it (property names, CA file loaded at creation)
    Producer(producer_config(settings)).flush(0)


def test_mutual_tls_fragment(tls: TlsFiles) -> None:
    settings = Settings(
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=tls.ca,
        kafka_ssl_certfile=tls.cert,
        kafka_ssl_keyfile=tls.key,
    )
    assert librdkafka_security(settings) == {
        "security.protocol": "ssl",
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.cert),
        "ssl.key.location": str(tls.key),
    }
    Producer(producer_config(settings)).flush(0)
    credentials = faust_credentials(settings)
    assert isinstance(credentials, faust.SSLCredentials)
    assert credentials.protocol is AuthProtocol.SSL
    assert credentials.context.verify_mode is ssl.CERT_REQUIRED


@pytest.mark.parametrize(("protocol", "tls_on"), [("SASL_SSL", True), ("SASL_PLAINTEXT", False)])
def test_faust_sasl_credentials(tls: TlsFiles, protocol: str, tls_on: bool) -> None:
    extra = {} if tls_on else {"kafka_ssl_cafile": None}
    credentials = faust_credentials(sasl_ssl(tls, kafka_security_protocol=protocol, **extra))
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == protocol
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert (credentials.username, credentials.password) == ("solaris", SECRET)
    assert (credentials.ssl_context is not None) is tls_on
    if credentials.ssl_context is not None:
        assert credentials.ssl_context.check_hostname
        assert credentials.ssl_context.verify_mode is ssl.CERT_REQUIRED
    assert SECRET not in repr(credentials)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "SOLARIS_KAFKA_SASL_USERNAME"),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_username": "u"},
            "SOLARIS_KAFKA_SASL_PASSWORD",
        ),
        ({"kafka_sasl_username": "u", "kafka_sasl_password": "p"}, "PROTOCOL=PLAINTEXT"),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_cafile": "/nonexistent/ca.pem"},
            "/nonexistent/ca.pem is not a readable file",
        ),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_certfile": "/etc/hostname"},
            "go together",
        ),
        ({"kafka_ssl_cafile": "/etc/hostname"}, "TLS files"),
    ],
)
def test_inconsistent_settings_are_refused_by_name(fields: dict[str, Any], message: str) -> None:
    settings = Settings(**fields)
    for build in (check_kafka_security, librdkafka_security, faust_credentials, client_config):
        with pytest.raises(KafkaSecurityError, match=re.escape(message)):
            build(settings)


def test_unreadable_tls_file_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate")
    settings = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=bogus)
    with pytest.raises(KafkaSecurityError, match="cannot load the Kafka TLS files"):
        faust_credentials(settings)


def test_password_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SOLARIS_KAFKA_SASL_USERNAME", "solaris")
    monkeypatch.setenv("SOLARIS_KAFKA_SASL_PASSWORD", SECRET)
    settings = Settings()
    assert settings.kafka_sasl_password.get_secret_value() == SECRET
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert SECRET not in text


#: confluent-kafka client constructors; outside kafka_clients they would miss the credentials
_CLIENT_CALL = re.compile(r"(?<![\w.])(Consumer|Producer|AdminClient)\(")


def test_every_confluent_client_is_built_by_kafka_clients() -> None:
    offenders = []
    for folder in ("streams", "bench"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if path.name == "kafka_clients.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _CLIENT_CALL.search(line):
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert offenders == [], "build clients with streams.kafka_clients:\n" + "\n".join(offenders)
