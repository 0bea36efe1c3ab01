"""The VMs' search grids: optimiser points, and KD weight × temperature for distillation.

``vm_kd`` searches as many KD points as ``vm_solaris`` searches optimiser points (issue 22:
"KD tuned with the same budget"), at the optimiser point the plain VM won.
"""

from __future__ import annotations

from dataclasses import replace

from models.config import GridPoint, TrainConfig


def kd_point(cfg: TrainConfig, gp: GridPoint) -> tuple[float, float]:
    """(weight, temperature) of the soft-label loss at ``gp`` (the config's when unset)."""
    weight = cfg.kd_weight if gp.kd_weight is None else gp.kd_weight
    temperature = cfg.kd_temperature if gp.kd_temperature is None else gp.kd_temperature
    return weight, temperature


def kd_grid(cfg: TrainConfig, base: GridPoint) -> list[GridPoint]:
    """``vm_kd``'s grid: every KD weight × temperature at ``base``'s optimiser settings."""
    return [
        replace(base, epochs=0, kd_weight=w, kd_temperature=t)
        for w in cfg.kd_weights
        for t in cfg.kd_temperatures
    ]


def kd_grid_or_none(cfg: TrainConfig, base: GridPoint) -> list[GridPoint]:
    """:func:`kd_grid` plus KD weight 0 (no distillation): a VM that can also learn from the
    FM's embeddings may choose not to distil, so validation never makes it worse than the same
    VM without the KD loss."""
    return [replace(base, epochs=0, kd_weight=0.0, kd_temperature=1.0), *kd_grid(cfg, base)]


def grid(cfg: TrainConfig) -> list[GridPoint]:
    return [
        GridPoint(lr, wd, dr)
        for lr in cfg.vm_lrs
        for wd in cfg.vm_weight_decays
        for dr in cfg.vm_id_dropouts
    ]
