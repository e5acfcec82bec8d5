"""The job that reads and extracts one shard; its runs take the curation workload's limits, like the rest of a
shard's per-document work."""

from lm_assets.defs.common.jobs import workload_job

shard_ingest_job = workload_job(
    "shard_ingest_job", "curation", ("raw_shard", "extracted_shard"),
    "Read and extract one shard (the text that quality labels are joined to).",
)

JOBS = [shard_ingest_job]
