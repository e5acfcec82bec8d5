"""Materialize the shard graph in-process: every shard's curation, then dedup across shards.

Used by `make demo` and by the benchmarks, which run the real assets on a folder of shards.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import dagster as dg

from lm_assets.defs.automation import landing_shards
from lm_assets.defs.dedup.assets import band_partitions
from lm_assets.defs.evaluation.assets import checkpoint_evaluation_sensor
from lm_assets.defs.partitions import add_new_partitions, shard_partitions

DEMO_MMLU_SUBJECTS = ["abstract_algebra", "high_school_geography", "world_religions"]
OFFLINE_TOXICITY = {"toxicity": {"backend": "profanity_check"}}
# For runs without quality labels (benchmarks of speed and dedup, tests): the rules alone decide.
OFFLINE_RUN_CONFIG = {"ops": {"curated_shard": {"config": {**OFFLINE_TOXICITY, "quality_policy": "rules"}}}}
# The sample crawl holds about 200 documents: a small vocabulary, short sequences, a larger val split.
DEMO_RUN_CONFIG = {
    "ops": {
        # The demo trains the quality classifier on the sample crawl's labels: the default policy applies.
        "curated_shard": {"config": OFFLINE_TOXICITY},
        "tokenizer": {"config": {"vocab_size": 4000}},
        "packed_dataset": {"config": {"seq_len": 257, "val_fraction": 0.05}},
        # The tiny model as a 2-stage pipeline: two CPU processes on gloo, one per core. Its context holds
        # 5-shot prompts whole (C-Eval's reach 1,200 tokens), so evaluation sees the examples.
        # A higher lr with a short warmup, so that 40 steps visibly learn.
        "training": {"config": {"model": "tiny", "steps": 40, "pp": 2, "tp": 1, "dp": 1, "save_every": 20,
                                "max_seq_len": 2048, "zero_stage": 1, "micro_batch_size": 4, "lr": 3e-3,
                                "warmup_steps": 4}},
        # A few MMLU subjects keep the demo quick; the asset's default is all 57.
        "mmlu_score": {"config": {"subjects": DEMO_MMLU_SUBJECTS}},
    }
}


def run_shard_graph(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    shards: list[str],
    run_config: dict | None = None,
    through_packing: bool = False,
    through_training: bool = False,
    train_classifier: bool = False,
    progress: Callable[[str], None] = lambda message: None,
    finished: Callable[[str, dg.ExecuteInProcessResult, float], None] = lambda what, result, seconds: None,
) -> list[dg.ExecuteInProcessResult]:
    """Curate and sketch each shard, find verified duplicate pairs per LSH band range, cluster across
    shards, apply the decisions per shard and, with `through_packing`, train the tokenizer, tokenize
    and pack. With `train_classifier`, every shard is
    extracted first, then the quality classifier is trained on the labels and curation uses it.
    `progress` hears of each run before it starts, `finished` after it ends (what ran, its result,
    seconds). Stops at the first failed run, which is returned last."""
    add_new_partitions(instance, shard_partitions, shards)
    if train_classifier:
        steps = [("shard_ingest_job", s, "raw_shard → extracted_shard") for s in shards]
        steps += [("quality_classifier_job", None, "quality_labels → quality_classifier")]
        steps += [("curated_shard_job", s, "curated_shard → minhash_signatures") for s in shards]
    else:
        steps = [("shard_curation_job", s, "raw_shard → extracted_shard → curated_shard → minhash_signatures") for s in shards]
    steps += [("dedup_edges_job", band, "dedup_edges") for band in band_partitions.get_partition_keys()]
    steps += [("dedup_job", None, "dedup_clusters across all shards")]
    steps += [("deduplicated_shard_job", s, "deduplicated_shard → decontaminated_shard") for s in shards]
    if through_packing:
        steps += [("tokenizer_job", None, "tokenizer")]
        steps += [("tokenized_shard_job", s, "tokenized_shard") for s in shards]
        steps += [("packing_job", None, "packed_dataset")]
    if through_training:
        steps += [("training_job", None, "training_run → checkpoint (DeepSpeed, through Pipes)")]
        steps += [("evaluation_job", EVERY_CHECKPOINT, "perplexity, mmlu_score, ceval_score, checkpoint_samples")]
    results = []
    for job_name, shard, what in expand_checkpoints(steps, instance):
        what = what + (f" for {shard}" if shard else "")
        progress(f"materializing {what}")
        job = defs.resolve_job_def(job_name)
        started = time.perf_counter()
        result = job.execute_in_process(
            partition_key=shard, instance=instance, run_config=run_config_for(run_config, job), raise_on_error=False
        )
        finished(what, result, time.perf_counter() - started)
        results.append(result)
        if not result.success:
            break
    return results


EVERY_CHECKPOINT = object()


def expand_checkpoints(steps: list, instance: dg.DagsterInstance):
    """The steps, with one per checkpoint to evaluate in place of EVERY_CHECKPOINT (known once training ran)."""
    for job_name, key, what in steps:
        if key is EVERY_CHECKPOINT:
            for checkpoint in checkpoints_to_evaluate(instance):
                yield job_name, checkpoint, what
        else:
            yield job_name, key, what


def checkpoints_to_evaluate(instance: dg.DagsterInstance) -> list[str]:
    """What `checkpoint_evaluation_sensor` requests on a tick now, run in process: every checkpoint
    partition that some evaluation asset has not been materialized for. The demo evaluates through
    it, as the sensor would when switched on (running the whole job for each)."""
    result = checkpoint_evaluation_sensor(dg.build_sensor_context(instance=instance))
    return [request.partition_key for request in result.run_requests or []]


def run_config_for(run_config: dict | None, job: dg.JobDefinition) -> dict | None:
    """The part of a graph-wide run config (`{"ops": {asset: ...}}`) that a job's ops take."""
    if not run_config:
        return None
    ops = {name: cfg for name, cfg in run_config.get("ops", {}).items() if job.graph.has_node_named(name)}
    return {"ops": ops} if ops else None


def shard_files(storage) -> list[str]:
    return landing_shards(storage)[0]
