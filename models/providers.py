"""onnxruntime execution providers: which to use, whether a session got them, and where a
session binds its inputs (CUDA when present, else CPU; an explicit request is a requirement)."""

from __future__ import annotations

from collections.abc import Sequence

import onnxruntime as ort

from models.errors import InferenceError

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def available_providers() -> list[str]:
    return list(ort.get_available_providers())


def resolve_providers(requested: Sequence[str] | None) -> list[str]:
    """The execution providers to use, in order.

    ``None`` / empty = automatic: CUDA when this onnxruntime build has it, else CPU. An explicit
    list is a requirement: a provider this build lacks (e.g. ``CUDAExecutionProvider`` on the
    CPU wheel, or without a GPU) raises :class:`InferenceError` naming what is available,
    instead of silently running on CPU at a fraction of the expected speed.
    """
    available = available_providers()
    if not requested:
        return [p for p in (CUDA, CPU) if p in available] or [CPU]
    missing = [p for p in requested if p not in available]
    if missing:
        raise InferenceError(
            f"onnxruntime providers {missing} were requested but this build offers {available} "
            "(for CUDA install the 'gpu' extra on a host with a GPU)"
        )
    return list(requested)


def inactive_providers(usable: Sequence[str], active: Sequence[str]) -> list[str]:
    """Providers a session was asked for but did not get.

    onnxruntime-gpu lists ``CUDAExecutionProvider`` as available even when the CUDA / cuDNN
    libraries cannot be loaded, then builds the session on CPU with only a log line: compare
    what was asked with what the session actually has.
    """
    return [p for p in usable if p not in active]


#: device name onnxruntime uses for ``OrtValue`` / IO binding, per execution provider
BINDING_DEVICES = {CUDA: "cuda", CPU: "cpu"}


def binding_device(provider: str, io_binding: bool | None = None) -> str | None:
    """Where a session binds its inputs and outputs, or ``None`` for a plain ``run``.

    ``None`` (automatic) binds on CUDA only: there a plain ``run`` stages every input and output
    through extra host copies, while a binding copies each input to the GPU once per batch and
    each output back once. On CPU binding gains nothing, so the plain path stays. ``True`` binds
    on the provider's own device (tests use it on CPU to run the CUDA code path), ``False``
    never binds; ``True`` on a provider we cannot bind for raises :class:`InferenceError`.
    """
    if io_binding is None:
        return BINDING_DEVICES[CUDA] if provider == CUDA else None
    if not io_binding:
        return None
    device = BINDING_DEVICES.get(provider)
    if device is None:
        raise InferenceError(f"IO binding is not supported on {provider}")
    return device
