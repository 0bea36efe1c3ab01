"""Kafka credentials (TLS and SASL) from :class:`~streams.settings.Settings`, for both clients.

SOLARIS talks to Kafka through two client libraries: confluent-kafka (librdkafka: producers,
the ranker's consumer, admin, lag, replay) and Faust (aiokafka: the workers). Both must see the
same credentials, so both configurations are derived here from one set of settings:

- :func:`librdkafka_security` -> the ``security.protocol`` / ``sasl.*`` / ``ssl.*`` fragment
  merged into every confluent-kafka client config (see :mod:`streams.kafka_clients`);
- :func:`faust_credentials` -> Faust's ``broker_credentials`` (SASL or SSL credentials carrying
  an :class:`ssl.SSLContext`).

Inconsistent combinations are refused up front with :class:`KafkaSecurityError` (a SASL protocol
without a user, a certificate without its key, a file that does not exist) instead of surfacing
later as an opaque handshake failure. The password is read from a ``SecretStr`` only here and
never logged.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
from faust.types.auth import CredentialsT

from streams.errors import StreamsError
from streams.settings import Settings

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


class KafkaSecurityError(StreamsError, ValueError):
    """The Kafka security settings are inconsistent or name a file that cannot be read."""


def check_kafka_security(settings: Settings) -> None:
    """Raise :class:`KafkaSecurityError` naming every problem of the Kafka security settings."""
    protocol = settings.kafka_security_protocol
    problems: list[str] = []
    if protocol in SASL_PROTOCOLS:
        if not settings.kafka_sasl_username:
            problems.append(f"{protocol} needs SOLARIS_KAFKA_SASL_USERNAME")
        if not settings.kafka_sasl_password.get_secret_value():
            problems.append(f"{protocol} needs SOLARIS_KAFKA_SASL_PASSWORD")
    elif settings.kafka_sasl_username or settings.kafka_sasl_password.get_secret_value():
        problems.append(f"SASL user/password given but SOLARIS_KAFKA_SECURITY_PROTOCOL={protocol}")
    files = _tls_files(settings)
    if files and protocol not in TLS_PROTOCOLS:
        problems.append(
            f"TLS files ({', '.join(files)}) given but SOLARIS_KAFKA_SECURITY_PROTOCOL={protocol}"
        )
    if (settings.kafka_ssl_certfile is None) != (settings.kafka_ssl_keyfile is None):
        problems.append("SOLARIS_KAFKA_SSL_CERTFILE and SOLARIS_KAFKA_SSL_KEYFILE go together")
    for name, path in files.items():
        if not path.is_file():
            problems.append(f"{name}={path} is not a readable file")
    if problems:
        raise KafkaSecurityError("Kafka security settings: " + "; ".join(problems))


def _tls_files(settings: Settings) -> dict[str, Path]:
    named = {
        "SOLARIS_KAFKA_SSL_CAFILE": settings.kafka_ssl_cafile,
        "SOLARIS_KAFKA_SSL_CERTFILE": settings.kafka_ssl_certfile,
        "SOLARIS_KAFKA_SSL_KEYFILE": settings.kafka_ssl_keyfile,
    }
    return {name: path for name, path in named.items() if path is not None}


def librdkafka_security(settings: Settings) -> dict[str, str]:
    """The librdkafka settings that authenticate a client; empty for PLAINTEXT (so a default
    config stays exactly as before). Raises :class:`KafkaSecurityError` when inconsistent."""
    check_kafka_security(settings)
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return {}
    config = {"security.protocol": protocol.lower()}
    if protocol in SASL_PROTOCOLS:
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism
        config["sasl.username"] = settings.kafka_sasl_username
        config["sasl.password"] = settings.kafka_sasl_password.get_secret_value()
    if settings.kafka_ssl_cafile is not None:
        config["ssl.ca.location"] = str(settings.kafka_ssl_cafile)
    if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
        config["ssl.certificate.location"] = str(settings.kafka_ssl_certfile)
        config["ssl.key.location"] = str(settings.kafka_ssl_keyfile)
    return config


def ssl_context(settings: Settings) -> ssl.SSLContext:
    """A client TLS context that verifies the broker (hostname included) against the configured
    CA (or the system store when none is given) and presents the client certificate if set."""
    check_kafka_security(settings)
    cafile = settings.kafka_ssl_cafile
    try:
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(cafile) if cafile else None
        )
        if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
            context.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise KafkaSecurityError(f"cannot load the Kafka TLS files: {exc}") from exc
    return context


def faust_credentials(settings: Settings) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for the settings; ``None`` for PLAINTEXT."""
    check_kafka_security(settings)
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return faust.SSLCredentials(ssl_context(settings))
    return faust.SASLCredentials(
        username=settings.kafka_sasl_username,
        password=settings.kafka_sasl_password.get_secret_value(),
        ssl_context=ssl_context(settings) if protocol == "SASL_SSL" else None,
        mechanism=settings.kafka_sasl_mechanism,
    )
