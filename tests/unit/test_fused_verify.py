"""``SOLARIS_FUSE_VERIFY``: the speculate agent verifies its own batch (no ``speculated`` hop)
and must send the same ``verified`` messages, and save the same ledgers, as the two agents."""

from __future__ import annotations

from typing import Any

import faust
import pytest

from schemas.records import ProposalBatch, RequestEvent
from streams.live.app import check_roles
from streams.live.components import Components
from tests.unit.test_agents import T0, Sent, put, run, table_data

#: two users, interleaved, with repeated candidates (later requests find fresh pairs)
REQUESTS = [
    RequestEvent(f"r{n}", 7 + n % 2, T0 + 1_000 * n, "feed", (1, 2, 3 + n % 3, 10 + n))
    for n in range(8)
]


def verified(parts: Components, sent: Sent) -> list[ProposalBatch]:
    return [parts.codec.decode(v, ProposalBatch) for v in sent.by_topic["agents-unit.verified"]]


async def _speculate(app: faust.App, parts: Components) -> None:
    """Two batches (the second reads the ledgers the first saved), then a redelivery of the
    first request (recognised from the saved ledger: nothing verified again)."""
    enc = parts.codec.encode
    await put(app, "speculate", [enc(r) for r in REQUESTS[:4]])
    await put(app, "speculate", [enc(r) for r in REQUESTS[4:]])
    await put(app, "speculate", [enc(REQUESTS[0])])


def _two_agents(monkeypatch: pytest.MonkeyPatch) -> tuple[list[ProposalBatch], Any]:
    async def body(app: faust.App, parts: Components, sent: Sent) -> Any:
        await _speculate(app, parts)
        spec = sent.by_topic["agents-unit.speculated"]
        await put(app, "verify", spec[:4])
        await put(app, "verify", spec[4:8])
        await put(app, "verify", spec[8:])
        return verified(parts, sent), dict(table_data(app, "ledger"))

    out: tuple[list[ProposalBatch], Any] = run(body, monkeypatch, agent_batch_max_wait_ms=200)
    return out


def test_fused_verify_sends_what_the_two_agents_send(monkeypatch: pytest.MonkeyPatch) -> None:
    want, want_ledgers = _two_agents(monkeypatch)

    async def body(app: faust.App, parts: Components, sent: Sent) -> Any:
        assert "verify" not in app.agents  # the topic has no reader
        await _speculate(app, parts)
        assert "agents-unit.speculated" not in sent.by_topic
        assert sent.writes[("ledger", 7)] == 2  # once per user and batch
        return verified(parts, sent), dict(table_data(app, "ledger"))

    got, ledgers = run(body, monkeypatch, agent_batch_max_wait_ms=200, fuse_verify=True)
    assert len(want) == len(REQUESTS) and got == want  # records, items, histories, all fields
    assert ledgers == want_ledgers


def test_fused_verify_saves_each_ledger_in_its_requests_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        enc = parts.codec.encode
        await put(app, "speculate", [enc(r) for r in REQUESTS[:2]], partitions=[1, 3])
        assert sent.changelog[("ledger", 7)] == 1 and sent.changelog[("ledger", 8)] == 3

    run(body, monkeypatch, fuse_verify=True)


def test_fused_verify_keeps_the_ledger_when_the_delivery_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(app: faust.App, parts: Components, sent: Sent) -> None:
        sent.fail_on = "verified"
        await put(app, "speculate", [parts.codec.encode(REQUESTS[0])])
        assert app.agents["speculate"]._crashed  # rerun whole after the restart
        assert 7 not in table_data(app, "ledger")

    run(body, monkeypatch, fuse_verify=True)


def test_fused_verify_needs_both_roles_in_one_worker() -> None:
    check_roles(frozenset({"speculate", "verify", "history"}), fuse_verify=True)
    check_roles(frozenset({"speculate"}))
    with pytest.raises(ValueError, match="same worker"):
        check_roles(frozenset({"speculate", "history"}), fuse_verify=True)
