"""compressed_checkpoint materialized on a checkpoint: its variants on disk, their costs, and the blocking
perplexity check."""

import dagster as dg
import numpy as np
import pytest
import torch

from tests.compression.test_gguf import TEXTS, write_packed_val


@pytest.fixture
def storage_with_checkpoint(tmp_path):
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.storage.layout import PACKED_FOLDER, checkpoint_run_folder
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import export_hf
    from lm_assets.training.model import Transformer

    tok = train_tokenizer(TEXTS, TokenizerConfig(vocab_size=400, num_threads=1), tmp_path / "tok")
    cfg = from_preset("tiny", 400, max_seq_len=128)
    net = Transformer(cfg, seed=5).eval()
    generator = torch.Generator().manual_seed(5)  # the same weights in every process, whatever ran before in it
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0, 0.1, generator=generator)
        net.head.output.weight.mul_(30)  # decisive logits: no near-tie for float rounding to flip
    hf = tmp_path / "storage" / checkpoint_run_folder("main") / "step_00000004" / "hf"
    export_hf(net, cfg, hf, tokenizer_model_path=tok.path)
    write_packed_val(tmp_path / "storage" / PACKED_FOLDER, load_model(hf))
    return tmp_path / "storage", hf


def materialize(storage, config):
    from lm_assets.defs.common.partitions import checkpoint_partitions
    from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
    from lm_assets.defs.compression.assets import compressed_checkpoint

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, ["main-step_00000004"])
    return dg.materialize(
        [compressed_checkpoint], partition_key="main-step_00000004", instance=instance, raise_on_error=False,
        resources={"storage": StorageResource(root=str(storage), s3=s3_resource_from_env())},
        run_config={"ops": {"compressed_checkpoint": {"config": config}}},
    )  # fmt: skip


def test_variants_are_written_beside_the_export_with_their_costs(storage_with_checkpoint):
    storage, hf = storage_with_checkpoint
    result = materialize(storage, {"mmlu_path": "", "questions_per_task": 3,
                                   "new_tokens": 4})  # fmt: skip
    assert result.success
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    costs = {c["kind"]: c for c in meta["costs"].value}
    assert set(costs) == {"gguf-f16", "gguf-q8_0", "int8"}
    for kind, path in meta["files"].value.items():
        assert path.startswith(str(hf.parent / "compressed")), kind
    assert (hf.parent / "compressed" / "model-q8_0.gguf").stat().st_size == costs["gguf-q8_0"]["bytes"]
    assert costs["gguf-q8_0"]["bytes"] < costs["gguf-f16"]["bytes"] < meta["export_bytes"].value
    assert "mmlu" not in meta["questions_compared"].value  # no MMLU where none is found
    assert meta["questions_compared"].value["hellaswag"] == 3
    assert np.isclose(costs["int8"]["base_perplexity"], meta["export_perplexity"].value)
    assert "| gguf-q8_0 |" in meta["variants"].value
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["perplexity_within_budget"].passed
    # The export served by transformers serve, four requests at once, answers as our own generation does.
    served = checks["served_answers_as_evaluated"]
    assert served.passed, served.metadata["answers"].value
    assert "completions, 4 requests at once" in served.metadata["endpoint"].text


def test_a_variant_over_its_perplexity_budget_fails_the_blocking_check(storage_with_checkpoint):
    storage, _ = storage_with_checkpoint
    result = materialize(storage, {"mmlu_path": "", "kinds": ["gguf-q8_0"], "questions_per_task": 1, "new_tokens": 2,
                                   "max_perplexity_rise_8bit": -1.0, "serve_tokens": 2})  # fmt: skip
    check = next(c for c in result.get_asset_check_evaluations() if c.check_name == "perplexity_within_budget")
    assert not check.passed and "gguf-q8_0" in check.metadata["over_budget"].text
    unknown = materialize(storage, {"kinds": ["gguf-q4_k"]})
    assert not unknown.success
