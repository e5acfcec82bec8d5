"""Jobs: a named selection of assets, tagged with the workload it belongs to and how long its runs may take.

A run of Dagster's implicit asset job (`dagster asset materialize`, `lm-assets materialize`, the UI's
Materialize button) carries no job tags: `run_limit_sensor` (defs/run_workers.py) gives it those of
the workload its assets belong to (`ASSET_WORKLOADS`, from the named jobs)."""

import dagster as dg

# The run tag deploy/dagster-production.yaml limits concurrency by (one training run at a time).
WORKLOAD_TAG = "lm-assets/workload"
MAX_RUNTIME_TAG = "dagster/max_runtime"
HOUR = 3600
# How long a run of each workload may take before run monitoring fails it. A curation run is up to 50 shards
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


# The workload of each asset, as its named jobs give it (the longest-running one when several do).
ASSET_WORKLOADS: dict[str, str] = {}


def workload_tags(workload: str) -> dict[str, str]:
    return {WORKLOAD_TAG: workload, MAX_RUNTIME_TAG: str(MAX_RUNTIME_S[workload])}


def run_workload(asset_keys) -> str | None:
    """The workload whose limits a run of `asset_keys` (user strings) takes: the longest-running of theirs."""
    workloads = {ASSET_WORKLOADS[key] for key in asset_keys if key in ASSET_WORKLOADS}
    return max(workloads, key=MAX_RUNTIME_S.__getitem__) if workloads else None


def workload_job(name: str, workload: str, assets: tuple[str, ...], description: str):
    """The job `name` materializing `assets` (by key), its runs tagged with `workload` and its maximum runtime."""
    for key in assets:
        known = ASSET_WORKLOADS.get(key)
        if known is None or MAX_RUNTIME_S[workload] > MAX_RUNTIME_S[known]:
            ASSET_WORKLOADS[key] = workload
    return dg.define_asset_job(
        name, selection=dg.AssetSelection.assets(*assets), tags=workload_tags(workload), description=description
    )
