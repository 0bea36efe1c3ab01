"""Unknown SOLARIS_* variables are an error that names them; script variables are allowed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streams.settings import Settings, unknown_variables


def test_misspelt_variable_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_TOPIC_PARTITONS", "8")  # typo of TOPIC_PARTITIONS
    with pytest.raises(ValidationError, match="SOLARIS_TOPIC_PARTITONS"):
        Settings()


def test_settings_and_script_variables_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLARIS_TOPIC_PARTITIONS", "8")
    monkeypatch.setenv("SOLARIS_KAFKA_PORT", "9192")  # infra/kafka.sh's own knob
    assert Settings().topic_partitions == 8
    env = {"SOLARIS_PYTHON": "x", "solaris_key_prefix": "y", "PATH": "/bin", "SOLARIS_NOPE": "1"}
    assert unknown_variables(env) == ["SOLARIS_NOPE"]
