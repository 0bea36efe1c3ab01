"""Bring your own FM: a graph built outside the trainer (onnx.helper) meets the contract, is
served by the same runner as the trained FM, and broken graphs are refused with clear reasons;
the trainer's own FM meets it too, and a bundle assembled around an outside FM the way
docs/bring-your-own-fm.md says loads, while one whose FM breaks the contract fails at load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from models.bundle import load_bundle  # noqa: E402
from models.errors import BundleError  # noqa: E402
from models.features import Vocab  # noqa: E402
from models.fm_contract import check_fm  # noqa: E402
from models.history import UserHistory  # noqa: E402
from models.runtime import FMRunner, OnnxSession  # noqa: E402
from streams.cli.main import app  # noqa: E402

D, L, ITEMS = 6, 4, np.array([100, 200, 300, 400], np.int64)


def weights(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The outside FM's item table (rows: pad, unknown, ITEMS) and logit weights."""
    rng = np.random.default_rng(7)
    table = rng.normal(size=(ITEMS.size + 2, dim)).astype(np.float32)
    return table, rng.normal(size=dim).astype(np.float32)


TABLE, WEIGHT = weights(D)


def outside_fm(
    path: Path,
    *,
    metadata: dict[str, str] | None = None,
    without: tuple[str, ...] = (),
    logit_name: str = "logit",
    item_type: int = TensorProto.INT64,
    dim: int = D,
    history_len: int = L,
) -> Path:
    """embedding = table[target] + mean over the history of table[hist_item] · engaged;
    logit = embedding · w. Built node by node, no torch. ``without``: metadata keys left out."""
    meta = {"model_version": "outside-fm-1", "dim": str(dim), "history_len": str(history_len)}
    meta.update(metadata or {})
    meta = {k: v for k, v in meta.items() if k not in without}
    table, weight = weights(dim)
    inputs = [
        helper.make_tensor_value_info("target_item", item_type, ["B"]),
        helper.make_tensor_value_info("hist_item", TensorProto.INT64, ["B", history_len]),
        helper.make_tensor_value_info("hist_label", TensorProto.INT64, ["B", history_len]),
        helper.make_tensor_value_info("hist_gap", TensorProto.INT64, ["B", history_len]),
    ]
    outputs = [
        helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", dim]),
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
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(weight, "w"),
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


def _reference(
    target: np.ndarray, hist_item: np.ndarray, hist_label: np.ndarray, table: np.ndarray = TABLE
) -> np.ndarray:
    kept = table[hist_item] * (hist_label == 2)[..., None]
    return table[target] + kept.mean(axis=1)


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


def test_bundle_dims_stand_in_for_missing_metadata_and_must_agree(tmp_path: Path) -> None:
    """``check_fm(dim=, history_len=)`` (what load_bundle passes from meta.json)."""
    path = outside_fm(tmp_path / "fm.onnx", without=("dim", "history_len"))
    alone = check_fm(path)
    assert any("metadata ['dim', 'history_len'] missing" in p for p in alone.problems)
    in_bundle = check_fm(path, dim=D, history_len=L)
    assert in_bundle.ok, in_bundle.problems
    assert (in_bundle.dim, in_bundle.history_len) == (D, L)
    assert not check_fm(path, dim=D + 1, history_len=L).ok  # the graph's d is 6
    told = check_fm(outside_fm(tmp_path / "told.onnx"), dim=D + 1, history_len=L)
    assert f"metadata dim={D}, the bundle's meta.json says {D + 1}" in told.problems


@pytest.fixture(scope="module")
def trained_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle from the real trainer (models.builder.build_bundle), as small as the live
    tests' (tests.integration.live_harness; about 2 s)."""
    pytest.importorskip("torch")
    from models.builder import build_bundle
    from tests.integration.live_harness import TINY_TRAIN, small_traffic

    root = tmp_path_factory.mktemp("trained")
    traffic = small_traffic(root / "traffic.avro", n_users=30, days=2.0)
    (root / "bundle").mkdir()
    build_bundle(traffic, TINY_TRAIN, root / "bundle", "c" * 20)
    return root / "bundle"


def test_the_trainers_own_fm_meets_the_contract(trained_bundle: Path) -> None:
    report = check_fm(trained_bundle / "fm.onnx")  # alone: its own metadata, no meta.json
    assert report.ok, report.problems
    meta = json.loads((trained_bundle / "meta.json").read_text())
    assert (report.model_version, report.dim, report.history_len) == (
        meta["model_version"],
        meta["dim"],
        meta["history_len"],
    )


def set_model_version(path: Path, version: str) -> None:
    """The docs' step: rewrite an ONNX file's model_version metadata."""
    model = onnx.load(path)
    for prop in model.metadata_props:
        if prop.key == "model_version":
            prop.value = version
    onnx.save(model, path)


def assemble(trained: Path, dest: Path, version: str = "outside-fm-1", **fm: object) -> Path:
    """docs/bring-your-own-fm.md, assembling a bundle: a trained bundle of the FM's d and L, the
    outside FM as fm.onnx, its vocabulary as fm_items, the trainer's FM leftovers removed, one
    model_version everywhere. (The test keeps the trainer's vm_solaris: the loading is under
    test here, not what vm_solaris learned.)"""
    shutil.copytree(trained, dest)
    meta = json.loads((dest / "meta.json").read_text())
    meta["model_version"] = version
    (dest / "meta.json").write_text(json.dumps(meta))
    fm.setdefault("dim", meta["dim"])
    fm.setdefault("history_len", meta["history_len"])
    outside_fm(dest / "fm.onnx", metadata={"model_version": version}, **fm)  # type: ignore[arg-type]
    with np.load(dest / "vocab.npz") as z:
        np.savez(dest / "vocab.npz", fm_items=ITEMS, vm_users=z["vm_users"], vm_items=z["vm_items"])
    for name in ("fm_state.onnx", "fm_decode.onnx", "item_vectors.npz"):
        (dest / name).unlink()
    for name in ("vm.onnx", "vm_solaris.onnx", "vm_fair.onnx"):
        if (dest / name).is_file():  # vm_fair.onnx: optional
            set_model_version(dest / name, version)
    return dest


def test_a_bundle_assembled_around_an_outside_fm_loads_and_serves(
    trained_bundle: Path, tmp_path: Path
) -> None:
    root = assemble(trained_bundle, tmp_path / "bundle-outside")
    bundle = load_bundle(root)
    dim, length = bundle.meta.dim, bundle.meta.history_len
    assert bundle.fm.model_version == "outside-fm-1" and bundle.state is None
    history = UserHistory(
        np.array([200, 300], np.int64), np.array([1, 0], np.int8), np.array([5, 6], np.int64)
    )
    items = np.array([100, 400, 555], np.int64)
    emb, _ = bundle.fm.embed(np.array([1, 1, 1]), items, np.full(3, 10_000), [history] * 3)
    pad = [0] * (length - 2)
    want = _reference(
        Vocab(ITEMS).lookup(items),
        np.array([[*pad, 3, 4]] * 3),
        np.array([[*pad, 2, 1]] * 3),
        weights(dim)[0],
    )
    np.testing.assert_allclose(emb, want, atol=1e-5)
    users = np.array([1, 1, 1])
    probs = bundle.solaris.score(users, items, np.full(3, 10_000), emb, np.zeros(3), [history] * 3)
    assert probs.shape == (3,) and np.isfinite(probs).all()


def test_the_trainers_split_fm_left_in_an_assembled_bundle_is_refused(
    trained_bundle: Path, tmp_path: Path
) -> None:
    root = assemble(trained_bundle, tmp_path / "bundle-outside")
    for name in ("fm_state.onnx", "fm_decode.onnx"):  # the trainer's FM, in two graphs
        shutil.copy(trained_bundle / name, root / name)
    with pytest.raises(BundleError, match=r"fm_state\.onnx is version"):
        load_bundle(root)


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"logit_name": "score"}, "output 'logit' is missing"),
        ({"dim": D}, f"metadata dim={D}, the bundle's meta.json says 16"),
    ],
)
def test_a_bundle_whose_fm_breaks_the_contract_fails_at_load(
    trained_bundle: Path, tmp_path: Path, broken: dict[str, object], reason: str
) -> None:
    root = assemble(trained_bundle, tmp_path / "bundle-outside", **broken)
    with pytest.raises(BundleError, match="does not meet the FM contract") as err:
        load_bundle(root)
    assert reason in str(err.value)
