"""The jobs that find duplicate pairs per band range, cluster them across shards and apply the decisions."""

from lm_assets.defs.common.jobs import workload_job

dedup_edges_job = workload_job(
    "dedup_edges_job", "dedup", ("dedup_edges",), "Find and verify the candidate duplicate pairs of one LSH band range."
)
dedup_job = workload_job(
    "dedup_job", "dedup", ("dedup_clusters",), "Cluster duplicates across shards, from the verified edges of every band range."
)
deduplicated_shard_job = workload_job(
    "deduplicated_shard_job", "dedup", ("deduplicated_shard", "decontaminated_shard"),
    "Apply the dedup decisions to one shard and drop what overlaps the evaluation sets.",
)

JOBS = [dedup_edges_job, dedup_job, deduplicated_shard_job]
