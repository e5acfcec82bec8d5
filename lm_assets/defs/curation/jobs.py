"""The jobs that read, extract, score and curate one shard, and train the quality classifier."""

from lm_assets.defs.common.jobs import stage_job

shard_curation_job = stage_job(
    "shard_curation_job", "curation", ("raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"),
    "Read, extract and curate one shard, and sketch it for dedup.",
)
shard_ingest_job = stage_job(
    "shard_ingest_job", "curation", ("raw_shard", "extracted_shard"),
    "Read and extract one shard (the text that quality labels are joined to).",
)
quality_classifier_job = stage_job(
    "quality_classifier_job", "quality", ("quality_labels", "quality_classifier"),
    "Read the quality labels and train the quality classifier on them.",
)
curated_shard_job = stage_job(
    "curated_shard_job", "curation", ("curated_shard", "minhash_signatures"),
    "Curate one extracted shard (with the current quality classifier) and sketch it for dedup.",
)

JOBS = [shard_curation_job, shard_ingest_job, quality_classifier_job, curated_shard_job]
