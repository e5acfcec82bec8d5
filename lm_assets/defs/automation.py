"""How shards enter and move: a sensor on the landing location, and a nightly refresh of stale curation."""


import dagster as dg

from lm_assets.corpus.keys import landing_files
from lm_assets.corpus.readers import SUPPORTED_SUFFIXES
from lm_assets.defs.curation.assets import CuratedShardConfig, ExtractedShardConfig, classifier_stale_shards
from lm_assets.defs.partitions import shard_partitions
from lm_assets.defs.ingest.assets import RawShardConfig
from lm_assets.defs.reporting import config_hash, latest_metadata
from lm_assets.defs.resources import LandingResource, StorageResource

# The run tag deploy/dagster-production.yaml limits concurrency by (one training run at a time).
STAGE_TAG = "lm-assets/stage"


def stage_tags(stage: str) -> dict[str, str]:
    return {STAGE_TAG: stage}


shard_curation_job = dg.define_asset_job(
    "shard_curation_job",
    tags=stage_tags("curation"),
    selection=dg.AssetSelection.assets("raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"),
    description="Read, extract and curate one shard, and sketch it for dedup.",
)
shard_ingest_job = dg.define_asset_job(
    "shard_ingest_job",
    tags=stage_tags("curation"),
    selection=dg.AssetSelection.assets("raw_shard", "extracted_shard"),
    description="Read and extract one shard (the text that quality labels are joined to).",
)
quality_classifier_job = dg.define_asset_job(
    "quality_classifier_job",
    tags=stage_tags("quality"),
    selection=dg.AssetSelection.assets("quality_labels", "quality_classifier"),
    description="Read the quality labels and train the quality classifier on them.",
)
curated_shard_job = dg.define_asset_job(
    "curated_shard_job",
    tags=stage_tags("curation"),
    selection=dg.AssetSelection.assets("curated_shard", "minhash_signatures"),
    description="Curate one extracted shard (with the current quality classifier) and sketch it for dedup.",
)
dedup_edges_job = dg.define_asset_job(
    "dedup_edges_job",
    tags=stage_tags("dedup"),
    selection=dg.AssetSelection.assets("dedup_edges"),
    description="Find and verify the candidate duplicate pairs of one LSH band range.",
)
dedup_job = dg.define_asset_job(
    "dedup_job",
    tags=stage_tags("dedup"),
    selection=dg.AssetSelection.assets("dedup_clusters"),
    description="Cluster duplicates across shards, from the verified edges of every band range.",
)
deduplicated_shard_job = dg.define_asset_job(
    "deduplicated_shard_job",
    tags=stage_tags("dedup"),
    selection=dg.AssetSelection.assets("deduplicated_shard", "decontaminated_shard"),
    description="Apply the dedup decisions to one shard and drop what overlaps the evaluation sets.",
)
tokenizer_job = dg.define_asset_job(
    "tokenizer_job",
    tags=stage_tags("tokens"),
    selection=dg.AssetSelection.assets("tokenizer"),
    description="Train the tokenizer.",
)
tokenized_shard_job = dg.define_asset_job(
    "tokenized_shard_job",
    tags=stage_tags("tokens"),
    selection=dg.AssetSelection.assets("tokenized_shard"),
    description="Tokenize one shard with the current tokenizer.",
)
training_job = dg.define_asset_job(
    "training_job",
    tags=stage_tags("training"),
    selection=dg.AssetSelection.assets("training_run", "checkpoint"),
    description="Train on the packed dataset and export the checkpoint.",
)
packing_job = dg.define_asset_job(
    "packing_job",
    tags=stage_tags("tokens"),
    selection=dg.AssetSelection.assets("packed_dataset"),
    description="Pack training sequences.",
)


def landing_shards(landing_storage) -> tuple[list[str], dict[str, str]]:
    """The shard files at the top of the landing location, and every other file there with why it is skipped."""
    return landing_files(landing_storage.list(hidden=True), SUPPORTED_SUFFIXES)


@dg.sensor(job=shard_curation_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def landing_sensor(context: dg.SensorEvaluationContext, landing: LandingResource) -> dg.SensorResult:
    """Adds one `shards` partition per new file at the top of the landing location and runs it; says
    which files it skips and why."""
    known = set(context.instance.get_dynamic_partitions(shard_partitions.name))
    shards, skipped = landing_shards(landing.storage())
    for key, reason in sorted(skipped.items()):
        context.log.warning(f"skipping landing file {key!r}: {reason}")
    new = [key for key in shards if key not in known]
    if not new:
        return dg.SensorResult(skip_reason=f"no new shard files ({len(known)} known, {len(skipped)} other files skipped)")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=f"shard:{key}") for key in new],
        dynamic_partitions_requests=[shard_partitions.build_add_request(new)],
    )


def current_config_hashes() -> dict:
    """Each curation stage's default config hash, with today's environment defaults."""
    return {
        dg.AssetKey("raw_shard"): config_hash(RawShardConfig()),
        dg.AssetKey("extracted_shard"): config_hash(ExtractedShardConfig()),
        dg.AssetKey("curated_shard"): config_hash(CuratedShardConfig()),
    }


def stale_shards(
    instance: dg.DagsterInstance, shards: list[str], current_hashes: dict | None = None, store=None
) -> list[str]:
    """Shards whose latest materialization of some stage ran with another config than the current default,
    or that were curated with another quality classifier than the current one (given the storage)."""
    stale = []
    current_hashes = current_config_hashes() if current_hashes is None else current_hashes
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


@dg.schedule(job=shard_curation_job, cron_schedule="0 2 * * *", default_status=dg.DefaultScheduleStatus.STOPPED)
def nightly_curation_refresh(context: dg.ScheduleEvaluationContext, storage: StorageResource):
    """Re-runs curation for every shard whose stages last ran with a different config (or never ran), or
    that an older quality classifier scored."""
    shards = context.instance.get_dynamic_partitions(shard_partitions.name)
    stale = stale_shards(context.instance, shards, store=storage.storage())
    if not stale:
        return dg.SkipReason(f"all {len(shards)} shards are current")
    return [dg.RunRequest(partition_key=s, run_key=f"refresh:{s}:{context.scheduled_execution_time:%Y%m%d}") for s in stale]


defs = dg.Definitions(
    jobs=[
        shard_curation_job,
        shard_ingest_job,
        quality_classifier_job,
        curated_shard_job,
        dedup_edges_job,
        dedup_job,
        deduplicated_shard_job,
        tokenizer_job,
        tokenized_shard_job,
        packing_job,
        training_job,
    ],
    sensors=[landing_sensor],
    schedules=[nightly_curation_refresh],
)
