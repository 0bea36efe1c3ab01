"""The one typed settings object of SOLARIS.

Built once in an entry point (CLI, worker) and passed down; nothing else reads the environment.
Every field maps to an env var ``SOLARIS_<FIELD>`` (e.g. ``SOLARIS_KAFKA_BOOTSTRAP``). The
fields are declared in sections, one module each (:mod:`streams.settings_services`,
:mod:`streams.settings_engine`, the rest here); :class:`Settings` is their one object.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from streams.settings_engine import EngineFields
from streams.settings_env import SCRIPT_VARIABLES, EnvWithoutServiceLinks, is_service_link
from streams.settings_services import ServiceFields
from streams.settings_units import HOUR_MS, RankBy

__all__ = ["HOUR_MS", "REPO_ROOT", "RankBy", "Settings", "unknown_variables"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def _default_data_dir() -> Path:
    # not resolved: a shared/ that is a symlink keeps its documented place beside the clone
    return REPO_ROOT.parent / "shared" / "data"


class Settings(EngineFields, ServiceFields, BaseSettings):
    """All SOLARIS knobs with their defaults; docs/configuration.md is generated from them."""

    model_config = SettingsConfigDict(env_prefix="SOLARIS_", frozen=True, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, but the environment without Kubernetes' service links."""
        env = EnvWithoutServiceLinks(settings_cls)
        return init_settings, env, dotenv_settings, file_secret_settings

    @model_validator(mode="after")
    def _no_unknown_variables(self) -> Settings:
        """A misspelt ``SOLARIS_*`` variable would otherwise be ignored silently (the default
        applies and nobody notices): refuse to start and name it."""
        unknown = unknown_variables(os.environ)
        if unknown:
            raise ValueError(
                f"unknown environment variables {unknown}: not a SOLARIS setting (see "
                "docs/configuration.md); unset or correct them"
            )
        return self

    # --- limits ----------------------------------------------------------------------------------
    max_candidates: int = Field(1_000, gt=0, description="Largest accepted candidate list.")

    # --- local infra -----------------------------------------------------------------------------
    cache_dir: Path = Field(
        Path.home() / ".cache" / "solaris", description="Cache of venvs, jars, runtime data."
    )
    state_dir: Path | None = Field(
        None,
        description=(
            "Faust table state (RocksDB) of the workers, one folder per consumer group (default: "
            "<cache_dir>/run/faust). Workers on one host need one each: RocksDB locks its files."
        ),
    )
    data_dir: Path = Field(default_factory=_default_data_dir, description="Real datasets.")
    log_level: str = Field("INFO", description="Log level of SOLARIS loggers.")
    log_json: bool = Field(
        False, description="Logs as JSON lines (as --log-json), e.g. for a cluster's log shipper."
    )
    require_services: bool = Field(
        False, description="Tests: fail (not skip) integration tests when Kafka/Redis are down."
    )

    def topic(self, name: str) -> str:
        """Full topic name of a logical topic (``requests`` -> ``solaris.requests``)."""
        return f"{self.topic_prefix}.{name}"

    @property
    def faust_state_root(self) -> Path:
        """Where the workers keep Faust's table state (``state_dir`` or its default)."""
        return self.state_dir or self.cache_dir / "run" / "faust"

    @property
    def aggregate_store_ttl_ms(self) -> int:
        """Physical TTL of stored aggregates: as long as any tier may still read them."""
        return max(self.aggregate_ttl_ms, self.neighbour_aggregate_ttl_ms)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``SOLARIS_*`` names in ``environ`` that are neither a setting nor a script variable."""
    known = {f"SOLARIS_{name.upper()}" for name in Settings.model_fields} | SCRIPT_VARIABLES
    return sorted(
        k
        for k, v in environ.items()
        if k.upper().startswith("SOLARIS_") and k.upper() not in known and not is_service_link(k, v)
    )
