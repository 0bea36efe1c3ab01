"""Every process serves a pinned bundle: never "the newest by mtime" (issue 24 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.errors import StreamsError
from streams.models_loader import load_models, only_bundle
from streams.settings import Settings


def test_the_only_bundle_is_served_without_a_pin(tmp_path: Path) -> None:
    (tmp_path / "bundle-aaa").mkdir()
    assert only_bundle(tmp_path) == tmp_path / "bundle-aaa"


def test_no_bundle_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(StreamsError, match="run `solaris train` first"):
        only_bundle(tmp_path)


def test_several_bundles_without_a_pin_are_refused_naming_them(tmp_path: Path) -> None:
    """A pod restarted after a new bundle landed would otherwise serve it beside pods still on
    the old one: a mixed FM group."""
    for name in ("bundle-old", "bundle-new"):
        (tmp_path / name).mkdir()
    with pytest.raises(
        StreamsError, match=r"2 bundles .*bundle-new, bundle-old.*SOLARIS_BUNDLE_DIR"
    ):
        only_bundle(tmp_path)
    settings = Settings(model_dir=tmp_path)
    with pytest.raises(StreamsError, match="none pinned"):
        load_models(settings)
