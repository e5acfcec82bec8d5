"""Materialize the shard graph in-process: every shard's curation, then dedup across shards.

Used by `make demo` and by the benchmarks, which run the real assets on a folder of shards.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from lm_assets.defs.automation import is_shard_file
from lm_assets.defs.partitions import shard_partitions

OFFLINE_RUN_CONFIG = {"ops": {"curated_shard": {"config": {"toxicity": {"backend": "profanity_check"}}}}}


def run_shard_graph(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    shards: list[str],
    run_config: dict | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> list[dg.ExecuteInProcessResult]:
    """Curate and sketch each shard, cluster across shards, then apply the decisions per shard.
    Stops at the first failed run, which is returned last."""
    new = [s for s in shards if s not in set(instance.get_dynamic_partitions(shard_partitions.name))]
    if new:
        instance.add_dynamic_partitions(shard_partitions.name, new)
    steps = [("shard_curation_job", s, "raw_shard → extracted_shard → curated_shard → minhash_signatures") for s in shards]
    steps += [("dedup_job", None, "dedup_clusters across all shards")]
    steps += [("deduplicated_shard_job", s, "deduplicated_shard") for s in shards]
    results = []
    for job_name, shard, what in steps:
        progress(f"materializing {what}" + (f" for {shard}" if shard else ""))
        config = run_config if job_name == "shard_curation_job" else None
        result = defs.resolve_job_def(job_name).execute_in_process(
            partition_key=shard, instance=instance, run_config=config, raise_on_error=False
        )
        results.append(result)
        if not result.success:
            break
    return results


def shard_files(storage) -> list[str]:
    return [key for key in storage.list() if is_shard_file(key)]
