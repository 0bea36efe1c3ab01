"""The ONNX contract of a foundation model SOLARIS can serve (bring your own FM, issue 25 item 4).

Any graph that meets it can replace the bundle's ``fm.onnx``, whatever trained it:

======================  ========  ==========  ==================================================
name                    dtype     shape       meaning
======================  ========  ==========  ==================================================
input ``target_item``   int64     [B]         candidate item index in the bundle's FM vocabulary
                                              (``vocab.npz`` ``fm_items``: 0 = padding, 1 =
                                              unknown item, i + 2 = ``fm_items[i]``)
input ``hist_item``     int64     [B, L]      the user's last L interactions before the request,
                                              oldest first, left-padded with 0
input ``hist_label``    int64     [B, L]      0 = padding, 1 = not engaged, 2 = engaged
input ``hist_gap``      int64     [B, L]      log-spaced bucket of (request time − interaction
                                              time), ``models.features.gap_buckets``; 0 = padding
output ``embedding``    float32   [B, d]      the interaction embedding SOLARIS stores and serves
output ``logit``        float32   [B]         the FM's own score (KD teacher, verification)
======================  ========  ==========  ==================================================

Metadata (``custom_metadata_map``): ``model_version`` (any string; the store tags every value with
it), ``dim`` (= d) and ``history_len`` (= L), which must agree with the graph's static shapes
where it has them. B may be dynamic; L and d may be dynamic in the graph (the metadata then
fixes them). Outputs must be finite for the dummy batch :func:`check_fm` runs.

:func:`check_fm` needs onnxruntime only (the serving install), not torch or onnx.
``models.bundle.load_bundle`` runs it on a bundle's ``fm.onnx`` with the bundle's ``meta.json``
``dim`` and ``history_len`` (which then stand in for metadata the graph lacks), so a bundle whose
FM breaks the contract fails at start with these reasons. User guide: docs/bring-your-own-fm.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FM_CONTRACT_INPUTS: dict[str, tuple[str, int]] = {
    "target_item": ("tensor(int64)", 1),
    "hist_item": ("tensor(int64)", 2),
    "hist_label": ("tensor(int64)", 2),
    "hist_gap": ("tensor(int64)", 2),
}
FM_CONTRACT_OUTPUTS: dict[str, tuple[str, int]] = {
    "embedding": ("tensor(float)", 2),
    "logit": ("tensor(float)", 1),
}
FM_METADATA = ("model_version", "dim", "history_len")
#: index range the dummy batch draws items from (0 pad, 1 unknown, 2.. items)
_DUMMY_ITEMS = 3


@dataclass
class FMCheck:
    """What :func:`check_fm` found: ``problems`` empty means the file meets the contract."""

    path: Path
    problems: list[str] = field(default_factory=list)
    model_version: str | None = None
    dim: int | None = None
    history_len: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _static(dim: object) -> int | None:
    return dim if isinstance(dim, int) else None


def _int_metadata(meta: dict[str, str], key: str, report: FMCheck) -> int | None:
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        report.problems.append(f"metadata {key}={raw!r} is not an integer")
        return None
    if value <= 0:
        report.problems.append(f"metadata {key}={value} must be positive")
        return None
    return value


def _check_signature(
    kind: str, found: dict[str, tuple[str, list[object]]], want: dict[str, tuple[str, int]]
) -> list[str]:
    problems = []
    for name, (dtype, rank) in want.items():
        if name not in found:
            problems.append(f"{kind} {name!r} is missing (has {sorted(found)})")
            continue
        got_type, shape = found[name]
        if got_type != dtype:
            problems.append(f"{kind} {name!r} is {got_type}, need {dtype}")
        if len(shape) != rank:
            problems.append(f"{kind} {name!r} has rank {len(shape)} {shape}, need rank {rank}")
    return problems


def _check_dims(
    report: FMCheck,
    inputs: dict[str, tuple[str, list[object]]],
    outputs: dict[str, tuple[str, list[object]]],
) -> None:
    """Static graph dims against the metadata."""
    for name in ("hist_item", "hist_label", "hist_gap"):
        shape = inputs.get(name, ("", []))[1]
        length = _static(shape[1]) if len(shape) == 2 else None
        if length is not None and report.history_len is not None and length != report.history_len:
            report.problems.append(
                f"input {name!r} has L={length}, metadata history_len={report.history_len}"
            )
    shape = outputs.get("embedding", ("", []))[1]
    width = _static(shape[1]) if len(shape) == 2 else None
    if width is not None and report.dim is not None and width != report.dim:
        report.problems.append(f"output 'embedding' has d={width}, metadata dim={report.dim}")


def _dummy_run(session: object, report: FMCheck, batch: int = 3) -> None:
    """One small batch: outputs of the promised shapes, finite."""
    length = report.history_len or 1
    rng = np.random.default_rng(0)
    feed = {
        "target_item": rng.integers(0, _DUMMY_ITEMS, batch).astype(np.int64),
        "hist_item": rng.integers(0, _DUMMY_ITEMS, (batch, length)).astype(np.int64),
        "hist_label": rng.integers(0, 3, (batch, length)).astype(np.int64),
        "hist_gap": rng.integers(0, 3, (batch, length)).astype(np.int64),
    }
    try:
        emb, logit = session.run(["embedding", "logit"], feed)  # type: ignore[attr-defined]
    except Exception as exc:  # onnxruntime's own errors: report, do not crash the check
        report.problems.append(f"a dummy batch of {batch} failed to run: {exc}")
        return
    if emb.shape != (batch, report.dim):
        report.problems.append(f"embedding came back {emb.shape}, need ({batch}, {report.dim})")
    if logit.shape != (batch,):
        report.problems.append(f"logit came back {logit.shape}, need ({batch},)")
    if not (np.all(np.isfinite(emb)) and np.all(np.isfinite(logit))):
        report.problems.append("the dummy batch gave non-finite outputs")


def _expect(report: FMCheck, key: str, found: int | None, want: int | None) -> int | None:
    """The metadata value, or the bundle's when the graph has none; a disagreement is a
    problem."""
    if want is None or found is None:
        return found if want is None else want
    if found != want:
        report.problems.append(f"metadata {key}={found}, the bundle's meta.json says {want}")
    return found


def check_fm(
    path: Path | str, *, dim: int | None = None, history_len: int | None = None
) -> FMCheck:
    """Validate an ONNX file against the FM contract above; never raises for a bad model.

    ``dim`` / ``history_len``: what the bundle serving the file says (``meta.json``). Given,
    the graph's metadata may leave that key out, and must agree with it where it has it.
    """
    import onnxruntime as ort

    report = FMCheck(Path(path))
    if not report.path.is_file():
        report.problems.append(f"{report.path} is not a file")
        return report
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(report.path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # not ONNX, or a graph onnxruntime cannot load
        report.problems.append(f"onnxruntime cannot load it: {exc}")
        return report
    inputs = {i.name: (i.type, list(i.shape)) for i in session.get_inputs()}
    outputs = {o.name: (o.type, list(o.shape)) for o in session.get_outputs()}
    report.problems += _check_signature("input", inputs, FM_CONTRACT_INPUTS)
    report.problems += _check_signature("output", outputs, FM_CONTRACT_OUTPUTS)
    extra = sorted(set(inputs) - set(FM_CONTRACT_INPUTS))
    if extra:
        report.problems.append(f"inputs {extra} are not in the contract (SOLARIS feeds none)")
    meta = dict(session.get_modelmeta().custom_metadata_map)
    given = {"dim": dim, "history_len": history_len}
    missing = [key for key in FM_METADATA if key not in meta and given.get(key) is None]
    if missing:
        report.problems.append(f"metadata {missing} missing (need {list(FM_METADATA)})")
    report.model_version = meta.get("model_version") or None
    if "model_version" in meta and not report.model_version:
        report.problems.append("metadata model_version is empty")
    report.dim = _expect(report, "dim", _int_metadata(meta, "dim", report), dim)
    report.history_len = _expect(
        report, "history_len", _int_metadata(meta, "history_len", report), history_len
    )
    _check_dims(report, inputs, outputs)
    if report.ok:  # only a graph with the right signature is worth running
        _dummy_run(session, report)
    return report
