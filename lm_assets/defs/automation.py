"""How shards enter and move: a sensor on the landing location, a nightly refresh of stale curation, and
the sensor that evaluates the assets' automation conditions. They span the domains, so they live beside
them rather than in any one."""

import dagster as dg

from lm_assets.corpus.ingest.readers import landing_shards
from lm_assets.corpus.quality.registry import classifier_stale_shards
from lm_assets.defs.common.environment import default_of
from lm_assets.defs.common.partitions import SHARDS_PER_RUN, partition_range_tags, shard_partitions
from lm_assets.defs.common.reporting import config_hash, latest_metadata
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import CuratedShardConfig, ExtractedShardConfig, curated_config_hash
from lm_assets.defs.curation.jobs import landed_shard_job
from lm_assets.defs.ingest.assets import RawShardConfig


@dg.sensor(job=landed_shard_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Adds a shards partition for each new file at the top of the landing location and runs "
           f"landed_shard_job for them, {SHARDS_PER_RUN} shards a run ($LM_ASSETS_SHARDS_PER_RUN, else {default_of('LM_ASSETS_SHARDS_PER_RUN')}); says "
           "which files it skips and why.")
def landing_sensor(context: dg.SensorEvaluationContext, landing: LandingResource) -> dg.SensorResult:
    """Adds one `shards` partition per new file at the top of the landing location and runs them,
    `SHARDS_PER_RUN` shards a run, as a backfill would; says which files it skips and why."""
    known = set(context.instance.get_dynamic_partitions(shard_partitions.name))
    shards, skipped = landing_shards(landing.storage(), landing.settle_s, known=known)
    for key, reason in sorted(skipped.items()):
        context.log.warning(f"skipping landing file {key!r}: {reason}")
    new = [key for key in shards if key not in known]
    if not new:
        return dg.SensorResult(skip_reason=f"no new shard files ({len(known)} known, {len(skipped)} other files skipped)")
    return dg.SensorResult(
        run_requests=shard_run_requests(new, SHARDS_PER_RUN),
        dynamic_partitions_requests=[shard_partitions.build_add_request(new)],
    )


def shard_run_requests(new: list[str], per_run: int) -> list[dg.RunRequest]:
    """Runs of at most `per_run` of the `new` shards: one shard, a run of its partition; several, a run of
    their partition range. The new shards are registered together, in this order, after every known one,
    so each range holds exactly its shards."""
    requests = []
    for start in range(0, len(new), per_run):
        chunk = new[start : start + per_run]
        if len(chunk) == 1:
            requests.append(dg.RunRequest(partition_key=chunk[0], run_key=f"shard:{chunk[0]}"))
            continue
        requests.append(dg.RunRequest(run_key=f"shards:{chunk[0]}..{chunk[-1]}", tags=partition_range_tags(chunk[0], chunk[-1])))
    return requests


def current_config_hashes(toxicity: ToxicityResource) -> dict:
    """Each curation stage's default config hash, with today's environment defaults and toxicity model."""
    return {
        dg.AssetKey("raw_shard"): config_hash(RawShardConfig()),
        dg.AssetKey("extracted_shard"): config_hash(ExtractedShardConfig()),
        dg.AssetKey("curated_shard"): curated_config_hash(CuratedShardConfig(), toxicity),
    }


def stale_shards(
    instance: dg.DagsterInstance, shards: list[str], current_hashes: dict | None = None, store=None,
    toxicity: ToxicityResource | None = None,
) -> list[str]:
    """Shards whose latest materialization of some stage ran with another config than the current default,
    or that were curated with another quality classifier than the current one (given the storage)."""
    stale = []
    current_hashes = current_config_hashes(toxicity or ToxicityResource()) if current_hashes is None else current_hashes
    scored_by_another = set(classifier_stale_shards(store, shards)) if store is not None else set()
    for shard in shards:
        if shard in scored_by_another:
            stale.append(shard)
            continue
        for key, current in current_hashes.items():
            recorded = (latest_metadata(instance, key, shard) or {}).get("config_hash")
            if recorded is None or recorded.value != current:
                stale.append(shard)
                break
    return stale


@dg.schedule(job=landed_shard_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Every night at 02:00 UTC, re-runs landed_shard_job for the shards whose stages last ran "
             "with another config (or never ran), or that an older quality classifier scored.")
def nightly_curation_refresh(context: dg.ScheduleEvaluationContext, storage: StorageResource,
                             toxicity: ToxicityResource):
    """Re-runs curation for every shard whose stages last ran with a different config (or never ran), or
    that an older quality classifier scored."""
    shards = context.instance.get_dynamic_partitions(shard_partitions.name)
    stale = stale_shards(context.instance, shards, store=storage.storage(), toxicity=toxicity)
    if not stale:
        return dg.SkipReason(f"all {len(shards)} shards are current")
    return [dg.RunRequest(partition_key=s, run_key=f"refresh:{s}:{context.scheduled_execution_time:%Y%m%d}") for s in stale]


def automation_condition_sensor(assets) -> dg.AutomationConditionSensorDefinition:
    """Dagster's sensor of automation conditions, declared so that the UI says which assets it moves."""
    eager = sorted(spec.key.to_user_string() for assets_def in assets if isinstance(assets_def, dg.AssetsDefinition)
                   for spec in assets_def.specs if spec.automation_condition is not None)
    return dg.AutomationConditionSensorDefinition(
        "default_automation_condition_sensor", target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Evaluates the assets' automation conditions every 30 s. {', '.join(eager)} are eager(): "
        "switched on, a shard that curated_shard finished flows on to its tokens, and dedup reruns as shards arrive.",
    )


defs = dg.Definitions(sensors=[landing_sensor], schedules=[nightly_curation_refresh])
