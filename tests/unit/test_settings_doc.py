"""docs/configuration.md is generated from Settings and must match it (issue 25 item 8)."""

from __future__ import annotations

from streams.settings import REPO_ROOT, Settings
from streams.settings_doc import settings_reference


def test_committed_reference_equals_the_settings() -> None:
    committed = (REPO_ROOT / "docs" / "configuration.md").read_text()
    assert committed == settings_reference(), (
        "docs/configuration.md is stale: run python -m streams.settings_doc > docs/configuration.md"
    )


def test_every_setting_is_documented_once() -> None:
    page = settings_reference()
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} has no description"
        assert page.count(f"| `SOLARIS_{name.upper()}` |") == 1, name


def test_no_machine_specific_paths_or_secrets_leak_into_the_page() -> None:
    from pathlib import Path

    page = settings_reference()
    assert str(Path.home()) + "/" not in page
    assert str(REPO_ROOT) not in page
