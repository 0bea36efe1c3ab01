"""Names shared by the evaluation report and its Markdown: which model key each transfer
ratio reads, and which ratios each table shows."""

from __future__ import annotations

from collections.abc import Collection

#: TR name → model key at lag ``{lag}``; top-level models are the ``@0`` keys.
TR_MODELS: dict[str, str] = {
    "kd": "vm_kd",
    "fm_logit": "vm_fm_logit@{lag}",
    "solaris": "vm_solaris@{lag}",
    "solaris_kd": "vm_solaris_kd@{lag}",
    "solaris_aggregate": "vm_solaris_aggregate@{lag}",
    "solaris_missing": "vm_solaris_missing@{lag}",
    "solaris_unavailable": "vm_solaris_unavailable@{lag}",
    "solaris_served": "vm_solaris_served@{lag}",
    "score_tiers": "vm_score_tiers@{lag}",
    "score_served": "vm_score_tiers_served@{lag}",
    # with a ServedTierSource: the VM trained and evaluated on what the serving engine read
    "solaris_engine": "vm_solaris_engine",
    "solaris_engine_missing": "vm_solaris_engine_missing",
    "solaris_engine_unavailable": "vm_solaris_engine_unavailable",
    "solaris_engine_kd": "vm_solaris_engine_kd",
    # the engine-built VM and tuned KD blended on validation logits (models.blend)
    "solaris_engine_blend": "vm_solaris_engine_blend",
    # design B (decoded user state) in place of every non-exact tier the engine served
    "solaris_engine_state": "vm_solaris_engine_state",
    "solaris_offline_on_engine": "vm_solaris_offline_on_engine",
    # issue 22 item 3 diagnostic: the item-aware fallback in the aggregate slot (serving lag)
    "solaris_item_aware": "vm_solaris_item_aware@{lag}",
    "solaris_item_served": "vm_solaris_item_served@{lag}",
    "solaris_state_aware": "vm_solaris_state_aware@{lag}",
    "solaris_state_served": "vm_solaris_state_served@{lag}",
}
LAGGED_TR = (
    "solaris",
    "fm_logit",
    "solaris_aggregate",
    "solaris_served",
    "score_tiers",
    "score_served",
)
TABLE_TR = ("solaris", "fm_logit", "solaris_aggregate", "solaris_served", "score_served")
#: Engine-built TRs (no lag of their own: the engine's vectors carry the pipeline's real
#: staleness); also reported in the serving lag's block, next to the offline served mix.
ENGINE_TR = (
    "solaris_engine",
    "solaris_engine_state",
    "solaris_engine_missing",
    "solaris_offline_on_engine",
    "solaris_engine_kd",
    "solaris_engine_blend",
    "solaris_item_aware",
    "solaris_item_served",
    "solaris_state_aware",
    "solaris_state_served",
)


#: TRs reported a second time against the id-only VM when the ranking VMs are fair
VS_ID_ONLY_TR = ("kd", "solaris", "solaris_engine")


def shipped_vm_key(names: Collection[str], kd: str) -> str:
    """Which trained VM a bundle ships as ``vm_solaris`` (``TrainConfig.vm_solaris_kd``): with
    ``kd`` "loss" the engine-built VM trained with the KD loss as well, with "blend" the
    engine-built VM blended with ``vm_kd``, when trained; else the engine-built VM; else the
    one trained on the offline tier construction. The builder and the evaluation's ``shipped``
    block both ask here, so the report judges what ships."""
    wanted = {"loss": "vm_solaris_engine_kd", "blend": "vm_solaris_engine_blend"}.get(kd)
    if wanted is not None and wanted in names:
        return wanted
    if "vm_solaris_engine" in names:
        return "vm_solaris_engine"
    return "vm_solaris"
