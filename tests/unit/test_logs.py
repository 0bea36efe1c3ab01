from __future__ import annotations

import json
import logging

import pytest

from streams.logs import configure_logging


def test_extra_fields_are_rendered_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", json=True)
    try:
        logging.getLogger("solaris.test").info("topic created", extra={"topic": "t1", "n": 3})
        line = capsys.readouterr().err.strip().splitlines()[-1]
        event = json.loads(line)
        assert event["event"] == "topic created"
        assert event["topic"] == "t1" and event["n"] == 3
        assert event["level"] == "info"
    finally:
        logging.getLogger().handlers.clear()
