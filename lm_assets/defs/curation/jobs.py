"""The jobs that read, extract and curate one shard."""

from lm_assets.defs.common.jobs import stage_job

shard_curation_job = stage_job(
    "shard_curation_job", "curation", ("raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"),
    "Read, extract and curate one shard, and sketch it for dedup.",
)
shard_ingest_job = stage_job(
    "shard_ingest_job", "curation", ("raw_shard", "extracted_shard"),
    "Read and extract one shard (the text that quality labels are joined to).",
)
curated_shard_job = stage_job(
    "curated_shard_job", "curation", ("curated_shard", "minhash_signatures"),
    "Curate one extracted shard (with the current quality classifier) and sketch it for dedup.",
)

curation_summary_job = stage_job(
    "curation_summary_job", "curation", ("curation_summary",),
    "Sum every curated shard's quality histograms and drops into the quality dashboard.",
)

JOBS = [shard_curation_job, shard_ingest_job, curated_shard_job, curation_summary_job]
