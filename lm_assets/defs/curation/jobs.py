"""The jobs that curate shards (shard_ingest_job, which reads and extracts one, is in defs/ingest/jobs.py)."""

from lm_assets.defs.common.jobs import workload_job

landed_shard_job = workload_job(
    "landed_shard_job", "curation", ("raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"),
    "Read, extract and curate one newly landed shard, and sketch it for dedup: what landing_sensor and "
    "nightly_curation_refresh run.",
)
shard_curation_job = workload_job(
    "shard_curation_job", "curation", ("curated_shard", "minhash_signatures"),
    "Curate one extracted shard (with the current quality classifier) and sketch it for dedup: what `make demo` "
    "runs after shard_ingest_job and the quality classifier.",
)

curation_summary_job = workload_job(
    "curation_summary_job", "curation", ("curation_summary",),
    "Sum every curated shard's quality histograms and drops into the quality dashboard.",
)

JOBS = [landed_shard_job, shard_curation_job, curation_summary_job]
