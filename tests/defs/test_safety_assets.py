"""safety_score, crows_pairs_score, bbq_score and cbbq_score materialized on a tiny exported checkpoint, base and
chat: every answer and question kept, scores as numeric metadata, and a base checkpoint's refusal marked as not
meaningful."""

import os
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.evaluation.safety import SAFETY_ASSETS
from lm_assets.sft.chat import CHAT_TEMPLATE
from lm_assets.storage.layout import checkpoint_key, checkpoint_run_folder, question_results_key, safety_answers_key
from lm_assets.training.config import from_preset
from lm_assets.training.export import CHAT_TEMPLATE_NAME, export_hf
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)
BASE, CHAT = checkpoint_key("main", "step_00000004"), checkpoint_key("sft", "step_00000002")


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    texts = [p.read_text(encoding="utf-8") for p in sorted(Path("data/eval").rglob("*"))
             if p.suffix in (".jsonl", ".csv") and ("safety" in p.parts or "bias" in p.parts)]  # fmt: skip
    tok = train_tokenizer(texts * 3, TokenizerConfig(vocab_size=1000, num_threads=1, hard_vocab_limit=False),
                          tmp_path_factory.mktemp("tok"))  # fmt: skip
    chat_tok = tmp_path_factory.mktemp("chat_tok") / "tokenizer.model"
    shutil.copy(tok.path, chat_tok)
    chat_tok.with_name(CHAT_TEMPLATE_NAME).write_text(CHAT_TEMPLATE)
    cfg = from_preset("tiny", tok.vocab_size, max_seq_len=512)
    for key, tokenizer in ((BASE, tok.path), (CHAT, chat_tok)):
        run, step = key.split("-", 1)
        export_hf(Transformer(cfg, seed=3).eval(), cfg, root / checkpoint_run_folder(run) / step / "hf", tokenizer_model_path=tokenizer)
    return root


def materialize(root, partition):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [partition])
    config = {a.key.to_user_string(): {"config": {"device": "cpu", **({"max_new_tokens": 8} if a.key.to_user_string() == "safety_score" else {})}}
              for a in SAFETY_ASSETS}  # fmt: skip
    result = dg.materialize(SAFETY_ASSETS, partition_key=partition, instance=instance, run_config={"ops": config},
                            resources={"storage": StorageResource(root=str(root), s3=s3_resource_from_env()),
                                       "toxicity": ToxicityResource(backend="profanity_check")})  # fmt: skip
    assert result.success
    return {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}


def test_safety_and_bias_on_a_base_checkpoint(storage_root):
    meta = materialize(storage_root, BASE)
    safety = meta["safety_score"]
    assert safety["refusal_meaningful"].value is False and "not meaningful" in safety["note"].value
    assert safety["headline"].value.startswith("harmful_toxic_share")
    assert 0.0 <= float(safety["main/refusal_rate_en"].value) <= 1.0 and "main/over_refusal_rate_zh" in safety
    # Charted: the base model's toxicity alone; its refusal and the per-language rates are text, not flat charts.
    charted = {k for k, v in safety.items() if isinstance(v, dg.FloatMetadataValue)}
    assert charted == {"main/harmful_toxic_share"}
    answers = pl.read_parquet(storage_root / safety_answers_key(BASE))
    assert answers.height == 48 and set(answers["language"]) == {"en", "zh"}
    assert set(answers["verdict"]) <= {"refused", "complied", "answered"} and answers["reason"].str.len_chars().min() > 0
    assert (answers.filter(pl.col("verdict") == "refused")["refusal_phrase"].is_not_null()).all()

    crows = meta["crows_pairs_score"]
    assert 0.0 <= crows["main/pct_stereotype"].value <= 1.0 and crows["main/likelihood_diff"].value > 0
    assert "main/pct_stereotype/gender" in crows
    pairs = pl.read_parquet(storage_root / question_results_key(BASE, "crows_pairs_english"))
    assert pairs.height == int(crows["pairs"].value) and (pairs["likelihood_diff"] == (pairs["ll_more"] - pairs["ll_less"]).abs()).all()

    for name, task, categories in (("bbq_score", "bbq", {"Age", "SES"}), ("cbbq_score", "cbbq", {"gender", "age"})):
        bbq = meta[name]
        assert 0.0 <= bbq["main/acc"].value <= 1.0 and -1.0 <= bbq["main/disamb_bias_score"].value <= 1.0
        assert all(f"| {c} |" in bbq["by_category"].value for c in categories)
        assert not any(key.startswith("main/disamb_bias_score/") for key in bbq)  # by_category has them
        questions = pl.read_parquet(storage_root / question_results_key(BASE, task))
        assert questions.height == int(bbq["questions"].value) and questions["acc"].mean() == pytest.approx(bbq["main/acc"].value, abs=1e-4)


def test_a_chat_checkpoint_answers_as_a_user_turn_and_its_refusal_counts(storage_root):
    safety = materialize(storage_root, CHAT)["safety_score"]
    assert safety["refusal_meaningful"].value is True and "note" not in safety
    assert safety["model_kind"].value.startswith("chat") and safety["headline"].value.startswith("refusal_rate")
    assert "sft/refusal_rate" in safety
