"""The task suite as assets: every task scored on a checkpoint from the shipped samples, each score as numeric
metadata beside its chance level, the questions kept, and benchmark_suite's table of them all."""

import os

import dagster as dg
import polars as pl
import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
from lm_assets.defs.evaluation.tasks import SCORE_ASSETS, TASK_SCORES, benchmark_suite
from lm_assets.evaluation.tasks import TASKS
from lm_assets.storage.layout import checkpoint_key, checkpoint_run_folder, question_results_key
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)
CHECKPOINT = checkpoint_key("main", "step_00000004")


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory):
    from pathlib import Path

    root = tmp_path_factory.mktemp("storage")
    texts = [p.read_text(encoding="utf-8") for p in sorted(Path("data/eval/tasks").rglob("*")) if p.suffix in (".jsonl", ".csv", ".tsv")]
    tok = train_tokenizer(texts * 3, TokenizerConfig(vocab_size=1200, num_threads=1, hard_vocab_limit=False),
                          tmp_path_factory.mktemp("tok"))  # fmt: skip
    cfg = from_preset("tiny", tok.vocab_size, max_seq_len=1024)
    export_hf(Transformer(cfg, seed=2).eval(), cfg, root / checkpoint_run_folder("main") / "step_00000004" / "hf",
              tokenizer_model_path=tok.path)  # fmt: skip
    return root


def test_every_task_is_scored_beside_its_chance_and_summarized(storage_root):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [CHECKPOINT])
    resources = {"storage": StorageResource(root=str(storage_root), s3=s3_resource_from_env())}
    config = {name: {"config": {"device": "cpu", **({"num_fewshot": 2} if name == "boolq_score" else {})}} for name in SCORE_ASSETS}
    result = dg.materialize([*TASK_SCORES, benchmark_suite], partition_key=CHECKPOINT, instance=instance,
                            resources=resources, run_config={"ops": config})  # fmt: skip
    assert result.success
    by_asset = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    for name, task in TASKS.items():
        meta = by_asset[f"{name}_score"]
        acc = meta["main/acc"].value
        assert 0.0 <= acc <= 1.0 and isinstance(meta["main/acc"], dg.FloatMetadataValue)
        assert ("main/acc_norm" in meta) == ("acc_norm" in task.metrics), name
        assert float(meta["chance"].value) == pytest.approx(0.25 if name in ("hellaswag", "arc_easy", "arc_challenge", "cmmlu") else 0.5, abs=0.05)
        assert "shipped sample" in meta["data"].value and meta["release"].value == task.release
        questions = pl.read_parquet(storage_root / question_results_key(CHECKPOINT, name))
        assert questions.height == int(meta["questions"].value) >= 6
        assert questions["prediction"].is_between(0, 3).all()
    assert by_asset["boolq_score"]["num_fewshot"].value == "2" and by_asset["piqa_score"]["num_fewshot"].value == "0"
    assert "| elementary mathematics |" in by_asset["cmmlu_score"]["by_subject"].value
    assert {"loglikelihood_A", "loglikelihood_B"} <= set(pl.read_parquet(storage_root / question_results_key(CHECKPOINT, "winogrande")).columns)

    suite = by_asset["benchmark_suite"]
    assert suite["benchmarks"].value == str(len(TASKS))
    assert suite["not_scored_yet"].value == "mmlu_score, ceval_score"
    for name in TASKS:
        assert suite[f"main/{name}/acc"].value == pytest.approx(by_asset[f"{name}_score"]["main/acc"].value)
        assert f"| {name} |" in suite["suite"].value
    header = [cell.strip() for cell in suite["suite"].value.splitlines()[0].strip("|").split("|")]
    assert header == ["benchmark", "acc", "acc norm", "chance band", "vs band", "n", "shots"]


def test_a_task_without_its_data_fails_naming_the_release(storage_root, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [CHECKPOINT])
    result = dg.materialize([TASK_SCORES[0]], partition_key=CHECKPOINT, instance=instance, raise_on_error=False,
                            resources={"storage": StorageResource(root=str(storage_root), s3=s3_resource_from_env())},
                            run_config={"ops": {"hellaswag_score": {"config": {"path": str(tmp_path / "none")}}}})  # fmt: skip
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error.message
    assert "hellaswag: no data at" in failure and "github.com/rowanz/hellaswag" in failure
