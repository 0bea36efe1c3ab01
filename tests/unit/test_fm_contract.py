"""Bring your own FM: a graph built outside the trainer (onnx.helper) meets the contract, is
served by the same runner as the trained FM, and broken graphs are refused with clear reasons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from models.features import Vocab  # noqa: E402
from models.fm_contract import check_fm  # noqa: E402
from models.history import UserHistory  # noqa: E402
from models.runtime import FMRunner, OnnxSession  # noqa: E402
from streams.cli.main import app  # noqa: E402

D, L, ITEMS = 6, 4, np.array([100, 200, 300, 400], np.int64)
RNG = np.random.default_rng(7)
TABLE = RNG.normal(size=(ITEMS.size + 2, D)).astype(np.float32)  # rows: pad, unknown, items
WEIGHT = RNG.normal(size=D).astype(np.float32)


def outside_fm(
    path: Path,
    *,
    metadata: dict[str, str] | None = None,
    logit_name: str = "logit",
    item_type: int = TensorProto.INT64,
) -> Path:
    """embedding = table[target] + mean over the history of table[hist_item] · engaged;
    logit = embedding · w. Built node by node, no torch."""
    meta = {"model_version": "outside-fm-1", "dim": str(D), "history_len": str(L)}
    meta.update(metadata or {})
    inputs = [
        helper.make_tensor_value_info("target_item", item_type, ["B"]),
        helper.make_tensor_value_info("hist_item", TensorProto.INT64, ["B", L]),
        helper.make_tensor_value_info("hist_label", TensorProto.INT64, ["B", L]),
        helper.make_tensor_value_info("hist_gap", TensorProto.INT64, ["B", L]),
    ]
    outputs = [
        helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", D]),
        helper.make_tensor_value_info(logit_name, TensorProto.FLOAT, ["B"]),
    ]
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Cast", ["target_item"], ["target64"], to=TensorProto.INT64),
        helper.make_node("Gather", ["table", "target64"], ["target_vec"]),
        helper.make_node("Gather", ["table", "hist_item"], ["hist_vec"]),
        helper.make_node("Equal", ["hist_label", "two"], ["engaged"]),
        helper.make_node("Cast", ["engaged"], ["weight"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["weight", "minus1"], ["weight3"]),
        helper.make_node("Mul", ["hist_vec", "weight3"], ["kept"]),
        helper.make_node("ReduceMean", ["kept"], ["hist_mean"], axes=[1], keepdims=0),
        helper.make_node("Cast", ["hist_gap"], ["gap_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["gap_f", "axes"], ["gap_sum"], keepdims=1),
        helper.make_node("Mul", ["gap_sum", "zero"], ["gap_zero"]),  # read, weighs nothing
        helper.make_node("Add", ["target_vec", "hist_mean"], ["summed"]),
        helper.make_node("Add", ["summed", "gap_zero"], ["embedding"]),
        helper.make_node("Mul", ["embedding", "w"], ["scaled"]),
        helper.make_node("ReduceSum", ["scaled", "axes"], [logit_name], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "outside_fm",
        inputs,
        outputs,
        [
            numpy_helper.from_array(TABLE, "table"),
            numpy_helper.from_array(WEIGHT, "w"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
            two,
            zero,
            axes,
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, meta)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _reference(target: np.ndarray, hist_item: np.ndarray, hist_label: np.ndarray) -> np.ndarray:
    kept = TABLE[hist_item] * (hist_label == 2)[..., None]
    return TABLE[target] + kept.mean(axis=1)


def test_an_fm_built_outside_the_trainer_meets_the_contract(tmp_path: Path) -> None:
    report = check_fm(outside_fm(tmp_path / "fm.onnx"))
    assert report.ok, report.problems
    assert (report.model_version, report.dim, report.history_len) == ("outside-fm-1", D, L)


def test_the_serving_runner_embeds_with_the_outside_fm(tmp_path: Path) -> None:
    session = OnnxSession(outside_fm(tmp_path / "fm.onnx"))
    runner = FMRunner(session, Vocab(ITEMS), L, session.metadata["model_version"], D)
    history = UserHistory(
        np.array([200, 300, 999], np.int64),
        np.array([1, 1, 0], np.int8),
        np.array([1_000, 1_001, 1_002], np.int64),
    )
    items = np.array([100, 400, 555], np.int64)
    emb, logit = runner.embed(np.array([1, 1, 1]), items, np.full(3, 10_000), [history] * 3)
    target = Vocab(ITEMS).lookup(items)  # 555 is unknown: index 1
    hist_item = np.array([[0, 3, 4, 1]] * 3)  # left-padded, oldest first; 999 unknown
    hist_label = np.array([[0, 2, 2, 1]] * 3)  # label 1 (engaged) is token 2
    want = _reference(target, hist_item, hist_label)
    np.testing.assert_allclose(emb, want, atol=1e-5)
    np.testing.assert_allclose(logit, want @ WEIGHT, atol=1e-5)


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"metadata": {"dim": "7"}}, "output 'embedding' has d=6, metadata dim=7"),
        ({"metadata": {"history_len": "x"}}, "metadata history_len='x' is not an integer"),
        ({"logit_name": "score"}, "output 'logit' is missing"),
        (
            {"item_type": TensorProto.INT32},
            "input 'target_item' is tensor(int32), need tensor(int64)",
        ),
    ],
)
def test_a_broken_fm_is_refused_with_the_reason(
    tmp_path: Path, broken: dict[str, object], reason: str
) -> None:
    report = check_fm(outside_fm(tmp_path / "fm.onnx", **broken))  # type: ignore[arg-type]
    assert not report.ok
    assert any(reason in p for p in report.problems), report.problems


def test_cli_accepts_the_outside_fm_and_rejects_a_broken_one(tmp_path: Path) -> None:
    runner = CliRunner()
    good = runner.invoke(app, ["models", "check", str(outside_fm(tmp_path / "fm.onnx"))])
    assert good.exit_code == 0 and "meets the FM contract" in good.output
    bad_path = outside_fm(tmp_path / "bad.onnx", logit_name="score")
    bad = runner.invoke(app, ["models", "check", str(bad_path)])
    assert bad.exit_code == 1 and "output 'logit' is missing" in bad.output
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    out = runner.invoke(app, ["models", "check", str(junk)])
    assert out.exit_code == 1 and "onnxruntime cannot load it" in out.output
