"""Where settings come from: the environment, minus what is not a SOLARIS setting.

Two kinds of ``SOLARIS_*`` variables are not settings: the shell scripts' own knobs under
``infra/`` (:data:`SCRIPT_VARIABLES`) and the variables Kubernetes injects for every Service
of a namespace (service links). The first are allowed; the second are dropped before the
settings read the environment, so neither trips the unknown-variable check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic_settings import EnvSettingsSource

#: variables of the shell scripts under ``infra/`` (their own knobs, not settings of the code)
SCRIPT_VARIABLES = frozenset(
    {
        "SOLARIS_PYTHON",
        "SOLARIS_BOOTSTRAP_PYTHON",
        "SOLARIS_EXTRAS",
        "SOLARIS_KAFKA_PORT",
        "SOLARIS_KAFKA_CONTROLLER_PORT",
        "SOLARIS_KAFKA_DATA_DIR",
        "SOLARIS_KAFKA_HEAP",
        "SOLARIS_KAFKA_LOG_LINES",
        "SOLARIS_KAFKA_START_TIMEOUT",
        "SOLARIS_KAFKA_STOP_TIMEOUT",
        "SOLARIS_KAFKA_FRESH",
        "SOLARIS_KAFKA_WARN_PARTITIONS",
        "SOLARIS_SERVICES_KAFKA_DATA_DIR",  # infra/with-services.sh: its own broker's data dir
        "SOLARIS_SERVICES_LOCK_WAIT_S",  # infra/with-services.sh: wait for another run's start/stop
        "SOLARIS_REDIS_PORT",
        "SOLARIS_REDIS_DATA_DIR",
        "SOLARIS_REDIS_START_TIMEOUT",
        "SOLARIS_REDIS_STOP_TIMEOUT",
        "SOLARIS_TEST_INFRA",  # tests/integration/containers.py: local (default) | containers
        "SOLARIS_PROMETHEUS_PORT",
        "SOLARIS_PROMETHEUS_DATA_DIR",
        "SOLARIS_PROMETHEUS_TARGETS",
        "SOLARIS_PROMETHEUS_SCRAPE_INTERVAL",
        "SOLARIS_PROMETHEUS_START_TIMEOUT",
        "SOLARIS_PROMETHEUS_STOP_TIMEOUT",
        "SOLARIS_REDIS_CLUSTER_PORTS",
        "SOLARIS_REDIS_CLUSTER_DIR",
    }
)


#: names Kubernetes gives a pod for every Service of its namespace (``enableServiceLinks``): a
#: Service ``solaris-exporter`` becomes ``SOLARIS_EXPORTER_SERVICE_HOST``,
#: ``SOLARIS_EXPORTER_PORT_9104_TCP_ADDR``, ... which carry our prefix without being settings
_SERVICE_LINK_NAME = re.compile(
    r"^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$"
)
#: ``<SERVICE>_PORT=tcp://10.96.0.12:9104`` (docker-link style): clashes with a real ``*_PORT``
#: setting by name (``SOLARIS_EXPORTER_PORT``), but a port setting is never such a URL
_SERVICE_LINK_URL = re.compile(r"^(tcp|udp|sctp)://[^/\s]+:\d+$")


def is_service_link(name: str, value: str | None) -> bool:
    """Whether ``name=value`` is a variable Kubernetes injected for a Service (not a setting)."""
    upper = name.upper()
    if _SERVICE_LINK_NAME.match(upper):
        return True
    return upper.endswith("_PORT") and value is not None and bool(_SERVICE_LINK_URL.match(value))


class EnvWithoutServiceLinks(EnvSettingsSource):
    """The environment source, minus Kubernetes' service-link variables."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = super()._load_env_vars()
        return {k: v for k, v in env.items() if not is_service_link(k, v)}
