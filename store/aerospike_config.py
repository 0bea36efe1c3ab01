"""How to reach an Aerospike cluster: seed hosts, credentials and TLS, and the connection.

A secured cluster takes :class:`AerospikeAuth`: user/password (internal authentication) and TLS
(the nodes' TLS name and the CA that signs their certificates); :func:`client_config` turns it
into the client's config dict. The ``aerospike`` client is imported lazily (an optional extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store.errors import StoreUnavailable


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:3000,h2"`` -> ``[("h1", 3000), ("h2", 3000)]``."""
    out = []
    for part in filter(None, (p.strip() for p in hosts.split(","))):
        host, _, port = part.partition(":")
        out.append((host, int(port) if port else 3000))
    if not out:
        raise ValueError("no Aerospike hosts given")
    return out


@dataclass(frozen=True, slots=True)
class AerospikeAuth:
    """Credentials and TLS of a secured Aerospike cluster; empty fields are not used.

    ``tls_name`` turns TLS on: it is the name the nodes' certificates carry (Aerospike checks
    it instead of the address). ``password`` is left out of ``repr`` so it is never logged.
    """

    user: str = ""
    password: str = field(default="", repr=False)
    tls_name: str = ""
    tls_cafile: str = ""


def client_config(hosts: str, auth: AerospikeAuth | None = None) -> dict[str, Any]:
    """The ``aerospike.client`` config for ``hosts`` and ``auth``.

    Raises ``ValueError`` for an inconsistent ``auth`` (a user without password or the reverse,
    a CA file without a TLS name, a CA file that does not exist)."""
    auth = auth or AerospikeAuth()
    problems = []
    if bool(auth.user) != bool(auth.password):
        problems.append("SOLARIS_AEROSPIKE_USER and SOLARIS_AEROSPIKE_PASSWORD go together")
    if auth.tls_cafile and not auth.tls_name:
        problems.append("SOLARIS_AEROSPIKE_TLS_CAFILE needs SOLARIS_AEROSPIKE_TLS_NAME")
    if auth.tls_cafile and not Path(auth.tls_cafile).is_file():
        problems.append(f"SOLARIS_AEROSPIKE_TLS_CAFILE={auth.tls_cafile} is not a readable file")
    if problems:
        raise ValueError("Aerospike security settings: " + "; ".join(problems))
    seeds = parse_hosts(hosts)
    config: dict[str, Any] = {"hosts": seeds}
    if auth.user:
        config["user"] = auth.user
        config["password"] = auth.password
    if auth.tls_name:
        config["hosts"] = [(host, port, auth.tls_name) for host, port in seeds]
        config["tls"] = {"enable": True}
        if auth.tls_cafile:
            config["tls"]["cafile"] = auth.tls_cafile
    return config


def connect(config: dict[str, Any]) -> Any:
    import aerospike
    from aerospike import exception as aero_exc

    try:
        return aerospike.client(config).connect()
    except aero_exc.AerospikeError as exc:
        seeds = ",".join(f"{h[0]}:{h[1]}" for h in config["hosts"])
        raise StoreUnavailable(f"cannot connect to Aerospike at {seeds}: {exc}") from exc
