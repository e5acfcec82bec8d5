"""local_run walks the asset graph in its topological order, one named job per run."""

import dagster as dg
import pytest

from lm_assets.app.local_run import EVERY_CHECKPOINT, QUALITY_ASSETS, EveryRegistered, graph_steps
from lm_assets.definitions import defs


def names(steps):
    def shown(key):
        return "every checkpoint" if key is EVERY_CHECKPOINT else f"every {key.name}" if isinstance(key, EveryRegistered) else key

    return [(job.name, shown(key)) for job, key, _ in steps]


def test_the_whole_graph_in_topological_order():
    steps = graph_steps(defs, None, (), ["a", "b"])
    assert names(steps) == [
        ("instruction_data_job", None), ("shard_ingest_job", "a"), ("shard_ingest_job", "b"), ("quality_classifier_job", None),
        ("shard_curation_job", "a"), ("shard_curation_job", "b"), ("curation_summary_job", None),
        ("dedup_edges_job", "every dedup_bands"), ("dedup_job", None),
        ("deduplicated_shard_job", "a"), ("deduplicated_shard_job", "b"), ("tokenizer_job", None), ("sft_dataset_job", None),
        ("tokenized_shard_job", "a"), ("tokenized_shard_job", "b"), ("packing_job", None), ("training_job", None),
        ("distill_job", None), ("sft_job", None), ("evaluation_job", "every checkpoint"), ("compression_job", "every checkpoint"),
        ("human_ratings_job", None),
        ("preference_data_job", None), ("preference_dataset_job", None), ("dpo_job", None),
        ("model_card_job", "every checkpoint"),
    ]
    assert steps[1][2] == "raw_shard → extracted_shard"
    assert steps[-7][2] == ("arc_challenge_score, arc_easy_score, bbq_score, boolq_score, cbbq_score, ceval_score, "
                            "checkpoint_samples, cmmlu_score, continuation_scores, crows_pairs_score, hellaswag_score, "
                            "humaneval_score, mmlu_score, perplexity, piqa_score, position_perplexity, safety_score, "
                            "winogrande_score, xcopa_zh_score, xstorycloze_zh_score → benchmark_suite")
    # Every asset of the graph is materialized by exactly one of the runs' jobs.
    covered = [key for job in {job.name: job for job, _, _ in steps}.values() for key in job.asset_layer.executable_asset_keys]
    assert sorted(covered) == sorted(defs.resolve_asset_graph().get_all_asset_keys())


def test_without_the_classifier_one_job_runs_a_shard_to_its_sketch():
    steps = graph_steps(defs, "decontaminated_shard", QUALITY_ASSETS, ["a"])
    assert names(steps)[0] == ("landed_shard_job", "a")
    assert steps[0][2] == "raw_shard → extracted_shard → curated_shard → minhash_signatures"
    assert names(steps)[-1] == ("deduplicated_shard_job", "a")


def test_assets_no_job_runs_together_are_refused():
    @dg.asset
    def first():
        return 1

    @dg.asset
    def second(first):
        return first

    only_second = dg.Definitions(assets=[first, second], jobs=[dg.define_asset_job("second_job", selection=[second])])
    with pytest.raises(ValueError, match="no job materializes first with the assets after it"):
        graph_steps(only_second, None, (), [])


def test_a_launched_run_is_a_run_of_the_code_locations_job(stops_started_processes, tmp_path, monkeypatch):
    """`make demo`'s runs: launched by the instance's run launcher on workspace.yaml's code location, so
    they belong to its jobs (their pages, the timeline, re-execution) like runs the UI launches."""
    import shutil
    from pathlib import Path

    from lm_assets.app.local_run import LOCATION, LaunchedRuns

    root = Path(__file__).resolve().parents[2]
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(root / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("LM_ASSETS_STORAGE_ROOT", str(tmp_path / "storage"))
    shard = "crawl-00000.warc.gz"
    with dg.DagsterInstance.get() as instance, LaunchedRuns(instance) as runs:
        instance.add_dynamic_partitions("shards", [shard])
        result = runs.execute(defs.resolve_job_def("shard_ingest_job"), shard, None)
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run.job_name == "shard_ingest_job" and run.remote_job_origin.location_name == LOCATION
        assert run.tags["dagster/partition"] == shard and run.tags["lm-assets/workload"] == "curation"
        materialized = {event.asset_key.to_user_string() for event in result.get_asset_materialization_events()}
        assert materialized == {"raw_shard", "extracted_shard"}


def test_after_the_graph_new_checkpoints_are_evaluated_and_the_newest_compressed():
    from lm_assets.app.local_run import last_steps

    instance = dg.DagsterInstance.ephemeral()
    keys = ["main-step_00000010", "sft-step_00000004", "dpo-step_00000002"]
    instance.add_dynamic_partitions("checkpoints", keys)
    steps = [(job.name, key) for job, key, _ in last_steps(defs, instance)]
    assert steps == [("evaluation_job", key) for key in keys] + [("compression_job", "dpo-step_00000002"),
                                                                 ("model_card_job", "dpo-step_00000002")]
