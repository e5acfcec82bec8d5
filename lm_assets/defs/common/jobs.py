"""Jobs: a named selection of assets, tagged with the stage it belongs to."""

import dagster as dg

# The run tag deploy/dagster-production.yaml limits concurrency by (one training run at a time).
STAGE_TAG = "lm-assets/stage"


def stage_tags(stage: str) -> dict[str, str]:
    return {STAGE_TAG: stage}


def stage_job(name: str, stage: str, assets: tuple[str, ...], description: str):
    """The job `name` materializing `assets` (by key), its runs tagged with `stage`."""
    return dg.define_asset_job(
        name, selection=dg.AssetSelection.assets(*assets), tags=stage_tags(stage), description=description
    )
