"""torch → ONNX export of the FM and the VMs (fixed opset, dynamic batch axis, versioned).

Graph contracts (input/output names are the runtime's contract, ``models.runtime``):

- ``fm.onnx``: ``target_item`` int64 [B], ``hist_item``/``hist_label``/``hist_gap`` int64 [B, L]
  → ``embedding`` float32 [B, d], ``logit`` float32 [B].
- ``vm.onnx``: ``user``, ``item`` int64 [B], ``context`` int64 [B, 2] → ``prob`` float32 [B].
- ``vm_solaris.onnx``: the same + ``embedding`` float32 [B, d], ``tier`` int64 [B] → ``prob``.

Each file carries ``metadata_props``: ``model_version``, ``model_name``, ``opset`` and any extra
key given (``dim``, ``history_len``, ...), so a served file says which training run made it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import torch
from torch import nn

from models.fm import (
    FM_INPUTS,
    FM_OUTPUTS,
    FoundationModel,
    StateDecoder,
    UserStateEncoder,
    state_width,
)
from models.user_features import N_USER_STATS, RECENT_K
from models.vm import VerticalModel

if TYPE_CHECKING:
    from models.blend_vm import BlendedVM

log = logging.getLogger(__name__)

OPSET = 18
VM_INPUTS = ("user", "item", "context")
SOLARIS_INPUTS = (*VM_INPUTS, "embedding", "tier")
USER_FEATURE_INPUTS = ("user_stats", "recent_pos")  # the fair VM's (models.user_features)


def vm_input_names(vm: VerticalModel | BlendedVM) -> tuple[str, ...]:
    """The ONNX inputs of ``vm``, in graph order."""
    names: tuple[str, ...] = VM_INPUTS
    if vm.user_features:
        names = (*names, *USER_FEATURE_INPUTS)
    if vm.embedding_dim:
        names = (*names, "embedding", "tier")
    return names


class ExportError(RuntimeError):
    """A model could not be exported to ONNX."""


class _VMProb(nn.Module):
    """Wraps a VM so the graph returns probabilities (what the ranker and verifier consume)."""

    def __init__(self, vm: VerticalModel | BlendedVM) -> None:
        super().__init__()
        self.vm = vm

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        names = vm_input_names(self.vm)
        return torch.sigmoid(self.vm(**dict(zip(names, args, strict=True))))


def _export(
    module: nn.Module,
    example: tuple[torch.Tensor, ...],
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    path: Path,
    metadata: dict[str, str],
) -> Path:
    module.eval()
    dynamic_axes = {name: {0: "batch"} for name in (*input_names, *output_names)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                example,
                str(path),
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_axes=dynamic_axes,
                opset_version=OPSET,
                dynamo=False,
            )
    except Exception as exc:  # torch raises many types from tracing/conversion
        raise ExportError(f"exporting {path.name} failed: {exc}") from exc
    model = onnx.load(str(path))
    props = {"opset": str(OPSET), **metadata}
    del model.metadata_props[:]
    for key, value in sorted(props.items()):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    log.info("exported %s (%s)", path, props.get("model_version", "?"))
    return path


def export_fm(fm: FoundationModel, history_len: int, path: Path, metadata: dict[str, str]) -> Path:
    """Write the FM graph (embedding + logit) to ``path``."""
    b = 2
    example = (
        torch.ones(b, dtype=torch.int64),
        torch.ones(b, history_len, dtype=torch.int64),
        torch.ones(b, history_len, dtype=torch.int64),
        torch.ones(b, history_len, dtype=torch.int64),
    )
    return _export(fm, example, FM_INPUTS, FM_OUTPUTS, path, {"model_name": "fm", **metadata})


def export_fm_split(
    fm: FoundationModel, history_len: int, out_dir: Path, metadata: dict[str, str]
) -> tuple[Path, Path]:
    """The FM in two graphs: ``fm_state.onnx`` (history → flattened user state ``state``) and
    ``fm_decode.onnx`` (``target_item`` + ``state`` → ``embedding``, ``logit``). Decoding a
    state gives the FM's outputs for any item as of the history the state was computed from:
    the state is stored per user, the decoder is light enough for the ranker (issue 22)."""
    b = 2
    hist = tuple(torch.ones(b, history_len, dtype=torch.int64) for _ in range(3))
    width = str(state_width(history_len, fm.item.embedding_dim))
    props = {**metadata, "state_width": width}
    state_path = _export(
        UserStateEncoder(fm),
        hist,
        FM_INPUTS[1:],
        ("state",),
        out_dir / "fm_state.onnx",
        {"model_name": "fm_state", **props},
    )
    example = (torch.ones(b, dtype=torch.int64), torch.zeros(b, int(width)))
    decode_path = _export(
        StateDecoder(fm, history_len),
        example,
        ("target_item", "state"),
        FM_OUTPUTS,
        out_dir / "fm_decode.onnx",
        {"model_name": "fm_decode", **props},
    )
    return state_path, decode_path


def export_vm(
    vm: VerticalModel | BlendedVM, name: str, path: Path, metadata: dict[str, str]
) -> Path:
    """Write a VM graph returning probabilities; solaris variants take embedding + tier too."""
    b = 2
    example: tuple[torch.Tensor, ...] = (
        torch.ones(b, dtype=torch.int64),
        torch.ones(b, dtype=torch.int64),
        torch.zeros(b, 2, dtype=torch.int64),
    )
    if vm.fm_logit_input:
        raise ExportError("vm_fm_logit is an offline baseline; it is not exported")
    if vm.user_features:
        example = (
            *example,
            torch.zeros(b, N_USER_STATS),
            torch.zeros(b, RECENT_K, dtype=torch.int64),
        )
    if vm.embedding_dim:
        example = (*example, torch.zeros(b, vm.embedding_dim), torch.zeros(b, dtype=torch.int64))
    names = vm_input_names(vm)
    props = {"model_name": name, **metadata}
    if vm.base is not None:  # the graph scores TIER_UNAVAILABLE rows with its baseline VM
        props["baseline_on_unavailable"] = "1"
        props["baseline_on_missing"] = "1" if bool(vm.missing_to_base) else "0"
    return _export(_VMProb(vm), example, names, ("prob",), path, props)
