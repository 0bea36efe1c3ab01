"""The feature-server bench's value check: a read past its deadline is compared again, a value
difference is not (pure logic: stand-in reader and client)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.serve_http import COMPARE_ATTEMPTS, agree
from store.reader import Lookup

SERVED = Lookup(np.ones((2, 4), np.float32), np.array([1, 2], np.uint8), np.array([5, 6]))
MISSING = Lookup(np.zeros((2, 4), np.float32), np.array([5, 5], np.uint8), np.array([0, 0]))
OTHER = Lookup(np.full((2, 4), 2.0, np.float32), np.array([1, 2], np.uint8), np.array([5, 6]))


@dataclass
class Stats:
    timeouts: int = 0


@dataclass
class Reader:
    """Answers from ``answers`` in turn; a MISSING answer counts as a read past the deadline."""

    answers: list[Lookup]
    stats: Stats = field(default_factory=Stats)

    def lookup(self, user: int, items: list[int], t: int) -> Lookup:
        got = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.stats.timeouts += got is MISSING
        return got


@dataclass
class Client:
    answer: Lookup
    server_timeouts: float = 0.0

    def lookup(self, body: bytes, binary: bool) -> Lookup:
        return self.answer

    def timeouts(self) -> float:
        return self.server_timeouts


CALL = (2, 7, [1, 2], b"{}")


def test_a_read_past_its_deadline_is_compared_again() -> None:
    assert agree(Reader([MISSING, SERVED]), Client(SERVED), CALL) == (True, 1)


def test_a_value_difference_without_a_deadline_is_a_disagreement_at_once() -> None:
    assert agree(Reader([SERVED]), Client(OTHER), CALL) == (False, 0)


def test_a_read_that_always_runs_past_its_deadline_disagrees_after_the_last_attempt() -> None:
    assert agree(Reader([MISSING]), Client(SERVED), CALL) == (False, COMPARE_ATTEMPTS - 1)


def test_equal_answers_agree_at_once() -> None:
    assert agree(Reader([SERVED]), Client(SERVED), CALL) == (True, 0)
