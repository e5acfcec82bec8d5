"""Jobs: a named selection of assets, tagged with the stage it belongs to and how long its runs may take.

A run of Dagster's implicit asset job (`dagster asset materialize`, `lm-assets materialize`, the UI's
Materialize button) carries no job tags: `run_limit_sensor` (defs/run_workers.py) gives it those of
the stage its assets belong to (`ASSET_STAGES`, from the named jobs)."""

import dagster as dg

# The run tag deploy/dagster-production.yaml limits concurrency by (one training run at a time).
STAGE_TAG = "lm-assets/stage"
MAX_RUNTIME_TAG = "dagster/max_runtime"
HOUR = 3600
# How long a run of each stage may take before run monitoring fails it. A curation run is up to 50 shards
# of a few CPU-minutes each (docs/scaling.md); a dedup round of a Common Crawl snapshot is 8-9 hours a
# band range; training runs for days.
MAX_RUNTIME_S = {
    "curation": 8 * HOUR,
    "quality": 2 * HOUR,
    "dedup": 12 * HOUR,
    "tokens": 6 * HOUR,
    "training": 7 * 24 * HOUR,
    "evaluation": 6 * HOUR,
    "sft": 6 * HOUR,
}


# The stage of each asset, as its named jobs give it (the longest-running stage when several do).
ASSET_STAGES: dict[str, str] = {}


def stage_tags(stage: str) -> dict[str, str]:
    return {STAGE_TAG: stage, MAX_RUNTIME_TAG: str(MAX_RUNTIME_S[stage])}


def run_stage(asset_keys) -> str | None:
    """The stage whose limits a run of `asset_keys` (user strings) takes: the longest-running of theirs."""
    stages = {ASSET_STAGES[key] for key in asset_keys if key in ASSET_STAGES}
    return max(stages, key=MAX_RUNTIME_S.__getitem__) if stages else None


def stage_job(name: str, stage: str, assets: tuple[str, ...], description: str):
    """The job `name` materializing `assets` (by key), its runs tagged with `stage` and its maximum runtime."""
    for key in assets:
        known = ASSET_STAGES.get(key)
        if known is None or MAX_RUNTIME_S[stage] > MAX_RUNTIME_S[known]:
            ASSET_STAGES[key] = stage
    return dg.define_asset_job(
        name, selection=dg.AssetSelection.assets(*assets), tags=stage_tags(stage), description=description
    )
