"""The worker's Faust app carries the Kafka credentials of ``Settings``.

Built with :func:`streams.live.app.create_app`, the call ``solaris worker`` makes, for the FM
worker and for the full pipeline; checked on ``app.conf.broker_credentials`` and on what Faust
hands aiokafka's producer and consumers. Without the credentials line in ``faust_app`` a
worker would connect in plaintext and never reach a SASL_SSL broker (the integration test in
``tests/integration/test_kafka_sasl.py`` runs a real worker against one).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from faust.types.auth import AuthProtocol, SASLMechanism

from store.memory import InMemoryStore
from streams.engine.models import EngineModels
from streams.live.app import ROLES, create_app
from streams.live.components import Components
from streams.settings import Settings
from tests.fakes import FakeFM
from tests.tls_certs import TlsFiles
from tests.unit.test_agents import close_current_loop, close_test_loops

SECRET = "app-s3cret"


@pytest.fixture()
def build(tmp_path: Path) -> Iterator[Any]:
    """``build(settings, roles)`` -> the worker's app (on a fresh event loop, closed after)."""
    close_current_loop()
    loop = asyncio.new_event_loop()  # Faust binds to the current loop
    asyncio.set_event_loop(loop)
    apps: list[faust.App] = []

    def make(settings: Settings, roles: list[str]) -> faust.App:
        settings = settings.model_copy(update={"state_dir": tmp_path / "state"})
        parts = Components(settings, EngineModels(FakeFM(4)), InMemoryStore())
        apps.append(create_app(settings, roles, parts, store="memory://"))
        return apps[-1]

    try:
        yield make
    finally:
        close_test_loops(loop, apps[-1]) if apps else loop.close()


ROLE_SETS = [pytest.param(["embed"], id="fm-worker"), pytest.param(list(ROLES), id="all-roles")]


@pytest.mark.parametrize("roles", ROLE_SETS)
def test_worker_app_carries_sasl_ssl_credentials(
    tls: TlsFiles, build: Any, roles: list[str]
) -> None:
    settings = Settings(
        topic_prefix="cred-unit",
        kafka_bootstrap="127.0.0.1:19092",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="solaris",
        kafka_sasl_password=SECRET,
        kafka_ssl_cafile=tls.ca,
    )
    app = build(settings, roles)
    creds = app.conf.broker_credentials
    assert isinstance(creds, faust.SASLCredentials), creds
    assert creds.protocol is AuthProtocol.SASL_SSL
    assert creds.mechanism is SASLMechanism.SCRAM_SHA_512
    assert (creds.username, creds.password) == ("solaris", SECRET)
    context = creds.ssl_context
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    subjects = [dict(x[0] for x in ca["subject"]) for ca in context.get_ca_certs()]
    assert {"commonName": "SOLARIS test CA"} in subjects  # our CA, not only the system store
    # what aiokafka gets: the worker's producer, and its consumers (same conversion)
    for auth in (
        app.producer._settings_auth(),
        credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context),
    ):
        assert auth["security_protocol"] == "SASL_SSL"
        assert auth["sasl_mechanism"] == "SCRAM-SHA-512"
        assert auth["sasl_plain_username"] == "solaris"
        assert auth["sasl_plain_password"] == SECRET
        assert auth["ssl_context"] is context


def test_worker_app_is_plaintext_by_default(build: Any) -> None:
    app = build(Settings(topic_prefix="cred-unit-plain"), ["embed"])
    assert app.conf.broker_credentials is None
    assert app.producer._settings_auth() == {"security_protocol": "PLAINTEXT"}
