"""Which names belong to a run (its topic prefix) when the run is cleaned up."""

from __future__ import annotations

import pytest

from streams.run_cleanup import of_run


@pytest.mark.parametrize(
    ("name", "mine"),
    [
        ("solaris-20261201-1.requests", True),  # a SOLARIS topic
        ("solaris-20261201-1-pipeline-history-changelog", True),  # a Faust changelog
        ("solaris-20261201-1-fm", True),  # a consumer group / state dir
        ("solaris-20261201-10.requests", False),  # another run whose prefix starts like it
        ("solaris.requests", False),  # the default deployment
        ("__consumer_offsets", False),
    ],
)
def test_a_run_owns_only_names_under_its_own_prefix(name: str, mine: bool) -> None:
    assert of_run(name, "solaris-20261201-1") is mine
