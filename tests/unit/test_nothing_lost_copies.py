"""The fault tests' verdict on pairs seen twice in ``verified``: a retry's re-send is at-least-once,
a second first-try copy is lost ledger state. Pure logic over a hand-made topic read."""

from __future__ import annotations

from tests.integration.nothing_lost import Verified, split_copies


def run_with(copies: dict[tuple[int, int, int], list[int]]) -> Verified:
    """A ``verified`` read in which each pair has copies sent by the given batch tries."""
    run = Verified()
    for pair, tries in copies.items():
        run.seen[pair] = len(tries)
        run.attempts[pair] = tries
        run.positions[pair] = [f"0:{n}" for n in range(len(tries))]
    return run


def test_copies_a_retry_sent_are_not_a_lost_ledger() -> None:
    run = run_with({(1, 10, 5): [1], (1, 11, 5): [1, 2], (2, 12, 7): [1, 2, 3]})
    assert split_copies(run) == ([], 2)


def test_two_first_try_copies_are_a_lost_ledger() -> None:
    run = run_with({(1, 10, 5): [1, 1], (2, 12, 7): [1, 1, 2], (3, 13, 9): [1, 2]})
    again, resent = split_copies(run)
    assert again == [(1, 10, 5), (2, 12, 7)]
    assert resent == 1


def test_a_pair_seen_once_is_neither() -> None:
    assert split_copies(run_with({(1, 10, 5): [1], (1, 11, 5): [2]})) == ([], 0)
