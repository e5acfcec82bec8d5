"""DPO and LoRA in the training program, on CPU with gloo.

The data is the preference layout `preference_dataset` writes (`lm_assets.sft.packing.pack_pairs`): each
chosen answer continues its prompt's last token as an arithmetic sequence, each rejected answer is
random tokens, so a tiny Llama learns to prefer the chosen ones within a few steps. The model DPO
starts from is a tiny Hugging Face Llama (`init_from`), as `dpo_run` starts from an SFT checkpoint.

- 2 data-parallel ranks: reward accuracy on the held-back pairs rises from its start; the per-step
  figures are reported; a run killed after its step-4 checkpoint resumes from the saved reference
  scores and continues with the losses of a run never interrupted;
- a LoRA adapter on 2 tensor-parallel ranks, the reference the base with the adapter switched off:
  the precomputed reference gives the same losses; only the adapter trains and is saved; the PEFT
  adapter folder on its base and the merged export both give the run's model;
- layouts and settings DPO cannot serve are refused before anything starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_assets.sft.packing import pack_pairs, write_preference_packed
from tests.support.tiny_llama import tiny_hf_llama
from tests.training.test_training_parallel import launch, losses, run_ok
from lm_assets.training.config import TrainConfig, override

VOCAB, EOS, PAD = 128, 2, 0
SEQ_LEN = 33
slow = pytest.mark.slow


def preference_pairs(n: int, seed: int = 0) -> list[tuple]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = rng.integers(4, VOCAB, size=6)
        chosen = (prompt[-1] + (1 + i % 3) * np.arange(1, 9)) % (VOCAB - 4) + 4
        rejected = rng.integers(4, VOCAB, size=8)
        mask = np.array([0] * 6 + [1] * 8)
        out.append((f"pair-{i}", np.concatenate([prompt, chosen]), mask, np.concatenate([prompt, rejected]), mask))
    return out


@pytest.fixture(scope="module")
def dpo_inputs(tmp_path_factory) -> tuple[Path, Path]:
    """(preference data, the Hugging Face model DPO starts from)."""
    root = tmp_path_factory.mktemp("dpo")
    packed, too_long = pack_pairs(preference_pairs(96), seq_len=SEQ_LEN, eos_id=EOS, pad_id=PAD, val_fraction=0.2)
    assert not too_long
    write_preference_packed(packed, root / "data", VOCAB, EOS, PAD, {})
    return root / "data", tiny_hf_llama(root / "base", VOCAB)


def dpo_args(data: Path, base: Path, ckpt: Path | None, *extra: str) -> list[str]:
    args = [f"data={data}", f"init_from={base}", "objective=dpo", "steps=10", "micro_batch_size=4", "optim.lr=1e-3",
            "optim.warmup_steps=2", "validation.batches=2", "loader.num_workers=0"]  # fmt: skip
    return args + ([f"checkpoint.dir={ckpt}"] if ckpt else []) + list(extra)


def summary_of(summaries: list) -> dict:
    assert len(summaries) == 1
    return summaries[0]


@slow
def test_dpo_on_two_ranks_learns_the_preference_and_a_killed_run_resumes_exactly(dpo_inputs, tmp_path):
    data, base = dpo_inputs
    summaries: list = []
    whole = run_ok(2, dpo_args(data, base, tmp_path / "whole", "checkpoint.save_every=4"), summaries=summaries)
    assert [m["step"] for m in whole] == list(range(1, 11))
    first, last = whole[0], whole[-1]
    assert first["loss"] == pytest.approx(np.log(2), abs=1e-6)  # the policy is its reference at the start
    assert first["reward_accuracy"] == 0.0 and first["reward_margin"] == 0.0
    for key in ("reward_accuracy", "reward_margin", "chosen_reward", "rejected_reward", "chosen_logp", "rejected_logp"):
        assert all(np.isfinite(m[key]) for m in whole), key
    assert np.mean(losses(whole)[-3:]) < np.log(2) - 0.01

    dpo_validation = summary_of(summaries)["dpo_validation"]
    start, end = dpo_validation["start"], dpo_validation["end"]
    assert start["val_reward_accuracy"] == 0.0 and start["val_kl"] == pytest.approx(0, abs=1e-5)
    assert end["val_reward_accuracy"] > 0.6 and end["val_reward_margin"] > 0 and end["val_kl"] > 1e-4
    assert end == {k: v for k, v in last.items() if k.startswith("val_")}
    assert (tmp_path / "whole" / "reference" / "scores.pt").exists()

    killed = tmp_path / "killed"
    rc, before, stderr = launch(2, dpo_args(data, base, killed, "checkpoint.save_every=4", "debug.fail_at_step=6"))
    assert rc != 0 and "injected failure before step 6" in stderr
    assert (killed / "step_00000004" / "layout.json").exists()
    after = run_ok(2, dpo_args(data, base, killed, "checkpoint.save_every=4"))
    assert [m["step"] for m in after] == list(range(5, 11))
    assert losses(after) == losses(whole)[4:]  # read, not rescored: the reference is the model the run started from
    assert [m["reward_margin"] for m in after] == [m["reward_margin"] for m in whole[4:]]

    (killed / "reference" / "identity.json").unlink()
    rc, _, stderr = launch(2, dpo_args(data, base, killed, "steps=12"))
    assert rc != 0 and "the reference scores the run started with are not in" in stderr


def saved_modules(step_dir: Path) -> list[dict]:
    return [torch.load(f, weights_only=True)["module"] for f in sorted(step_dir.glob("mp_rank_*_model_states.pt"))]


@slow
def test_dpo_with_a_lora_adapter_on_two_tensor_parallel_ranks(dpo_inputs, tmp_path):
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    data, base = dpo_inputs
    lora = ["adapter.type=lora", "adapter.rank=4", "adapter.alpha=8", "adapter.target_modules=q_proj,v_proj,o_proj,down_proj",
            "optim.lr=2e-2", "dpo.beta=0.5"]  # fmt: skip
    summaries: list = []
    live = run_ok(2, dpo_args(data, base, tmp_path / "live", "parallel.tp=2", "dpo.reference=adapter-disabled",
                              "checkpoint.save_every=5", *lora), summaries=summaries)  # fmt: skip
    precomputed = run_ok(2, dpo_args(data, base, None, "parallel.tp=2", *lora))
    assert losses(live) == pytest.approx(losses(precomputed), abs=1e-5)  # the same reference, either way
    assert np.mean(losses(live)[-3:]) < np.log(2) - 0.01

    summary = summary_of(summaries)
    adapter = summary["adapter"]
    assert adapter["adapted_layers"] == 8 and adapter["trained_share"] < 0.1  # rank 4 of a 64-wide model
    assert adapter["optimizer_state_bytes"] == 8 * adapter["trained_parameters"]
    assert adapter["memory_saved_bytes"] > 0
    assert summary["dpo_validation"]["end"]["val_kl"] > 0  # the adapter moved the policy off its base

    step = tmp_path / "live" / "step_00000010"
    modules = saved_modules(step)
    assert len(modules) == 2
    for module in modules:  # each tensor-parallel rank saved its adapter shards, nothing frozen
        assert module and all(k.endswith((".lora_A", ".lora_B")) for k in module)
    assert sum(t.numel() for t in modules[0].values()) == adapter["trained_parameters"]  # rank 0's

    model = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32).eval()
    peft = PeftModel.from_pretrained(model, summary["peft_adapter"]).eval()
    merged = LlamaForCausalLM.from_pretrained(summary["hf_export"], torch_dtype=torch.float32).eval()
    ids = torch.arange(4, 36).view(1, -1)
    with torch.no_grad():
        theirs, ours = peft(ids).logits, merged(ids).logits
        plain = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)(ids).logits
    assert torch.allclose(theirs, ours, atol=1e-5)
    assert (theirs - plain).abs().max() > 1e-4  # the adapter is not a no-op

    from lm_assets.training import checkpoint, hf_init

    earlier = checkpoint.model_state_dict(tmp_path / "live", "step_00000005")  # what evaluation exports of any tag
    frozen = hf_init.weights(base)
    assert set(earlier) == set(frozen)
    assert torch.equal(earlier["layers.0.attn.k_proj.weight"], frozen["layers.0.attn.k_proj.weight"])  # not a target
    assert not torch.allclose(earlier["layers.0.attn.q_proj.weight"], frozen["layers.0.attn.q_proj.weight"])


def config(*assignments: str) -> TrainConfig:
    cfg = TrainConfig(data="x", objective="dpo")
    for a in assignments:
        cfg = override(cfg, a)
    return cfg


def test_settings_dpo_and_adapters_cannot_serve_are_refused(tmp_path):
    base = tiny_hf_llama(tmp_path / "base", VOCAB)
    with pytest.raises(ValueError, match="objective=dpo with pipeline parallelism .* per-pair rewards"):
        config("parallel.pp=2").validate()
    with pytest.raises(ValueError, match="adapter-disabled needs an adapter"):
        config("dpo.reference=adapter-disabled").validate()
    with pytest.raises(ValueError, match="dpo.beta must be positive"):
        config("dpo.beta=0").validate()
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        config("dpo.label_smoothing=0.5").validate()
    with pytest.raises(ValueError, match="objective must be one of"):
        config("objective=ppo").validate()
    with pytest.raises(ValueError, match="an adapter adapts a trained model: set init_from"):
        config("adapter.type=lora").validate()
    lora = ("adapter.type=lora", f"init_from={base}")
    with pytest.raises(ValueError, match="adapter with ZeRO stage 3 is refused"):
        config(*lora, "zero_stage=3").validate()
    with pytest.raises(ValueError, match="adapter with pipeline parallelism"):
        config(*lora, "objective=lm", "parallel.pp=2").validate()
    with pytest.raises(ValueError, match="adapter.target_modules must be a non-empty subset"):
        config(*lora, "adapter.target_modules=q_proj,qkv").validate()
    config(*lora, "dpo.reference=adapter-disabled", "parallel.tp=2", "zero_stage=2").validate()


def test_lm_data_is_refused_for_dpo(tmp_path):
    from tests.training.test_training_parallel import write_packed

    packed = write_packed(tmp_path / "lm", n_seq=16)
    rc, _, stderr = launch(1, [f"data={packed}", "objective=dpo", "steps=1", "vocab_size=300"], launcher="python")
    assert rc != 0 and "objective=dpo needs preference data" in stderr
    assert json.loads((packed / "manifest.json").read_text())["splits"]["train"]["sequences"] == 16


@slow
def test_fine_tuning_with_a_lora_adapter_resumes_exactly_from_adapter_only_checkpoints(tmp_path):
    """`sft_run`'s adapter path: the next-token objective, the adapters alone trained and saved, and a killed run
    resumed over the frozen base (loaded from init_from again) continuing as if never interrupted."""
    from tests.training.test_training_parallel import write_packed

    data = write_packed(tmp_path / "lm", n_seq=64)
    base = tiny_hf_llama(tmp_path / "base", 300)
    args = [f"data={data}", f"init_from={base}", "steps=8", "micro_batch_size=4", "optim.lr=1e-2", "optim.warmup_steps=1",
            "adapter.type=lora", "adapter.rank=4", "adapter.target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
            "checkpoint.save_every=4", "loader.num_workers=0", "validation.batches=0"]  # fmt: skip
    whole = run_ok(2, args + [f"checkpoint.dir={tmp_path / 'whole'}"])
    assert np.mean(losses(whole)[-2:]) < losses(whole)[0] - 0.05
    killed = tmp_path / "killed"
    rc, _, stderr = launch(2, args + [f"checkpoint.dir={killed}", "debug.fail_at_step=6"])
    assert rc != 0 and "injected failure before step 6" in stderr
    after = run_ok(2, args + [f"checkpoint.dir={killed}"])
    assert [m["step"] for m in after] == [5, 6, 7, 8]
    assert losses(after) == losses(whole)[4:]
    for module in saved_modules(killed / "step_00000008"):
        assert module and all(k.endswith((".lora_A", ".lora_B")) for k in module)
    rc, _, stderr = launch(1, args + [f"checkpoint.dir={killed}", "steps=10", "micro_batch_size=8"])
    assert rc != 0 and "holds adapter weights only; resume it with the layout it was saved with" in stderr


def reference_scores(splits: dict[str, int], val_positions: dict[int, int], vocab: int):
    from lm_assets.training.dpo import ReferenceScores

    generator = torch.Generator().manual_seed(0)
    logps = {split: -1 - 20 * torch.rand(n, 2, generator=generator, dtype=torch.float64) for split, n in splits.items()}
    val = {row: torch.log_softmax(torch.randn(n, vocab, generator=generator), -1) for row, n in val_positions.items()}
    return ReferenceScores(logps, {row: table.half() for row, table in val.items()})


def test_reference_scores_that_do_not_fit_the_run_or_its_record_are_refused(tmp_path):
    import hashlib

    from lm_assets.training.dpo import ReferenceScores

    splits, val_positions = {"train": 53, "val": 3}, {0: 8, 1: 7, 2: 8}
    identity = {"splits": splits, "val_rows": [[0, 1], [2]], "model": {"vocab_size": 16}, "init_from": "base"}
    folder = tmp_path / "reference"
    good = reference_scores(splits, val_positions, 16)
    good.save(folder, identity)
    scores = folder / "scores.pt"
    recorded = json.loads((folder / "identity.json").read_text())
    assert recorded == identity | {"scores_sha256": hashlib.sha256(scores.read_bytes()).hexdigest()}
    loaded = ReferenceScores.load(folder, identity, val_positions)
    assert torch.equal(loaded.logps["train"], good.logps["train"]) and loaded.val_logprobs.keys() == {0, 1, 2}

    nan = {k: v.clone() for k, v in good.logps.items()}
    nan["train"][17, 1] = float("nan")
    short = good.logps | {"train": good.logps["train"][:3]}
    zeros = {k: torch.zeros_like(v) for k, v in good.logps.items()}
    cases = {
        "nan": ({"logps": nan, "val_logprobs": good.val_logprobs}, r"1 of the scores of split 'train' are not finite"),
        "3 of 53 rows": ({"logps": short, "val_logprobs": good.val_logprobs}, r"'train'.*\(3, 2\).*53 rows"),
        "no validation scores": ({"logps": good.logps, "val_logprobs": {}}, r"validation rows \[0, 1, 2\].*none"),
        "zeros": ({"logps": zeros, "val_logprobs": good.val_logprobs}, None),
    }
    for content, refusal in cases.values():
        good.save(folder, identity)
        torch.save(content, scores)  # the file replaced, its record left as it was
        with pytest.raises(ValueError, match=f"{scores}.*sha256"):
            ReferenceScores.load(folder, identity, val_positions)
        if refusal is None:
            continue
        recorded["scores_sha256"] = hashlib.sha256(scores.read_bytes()).hexdigest()  # the record rewritten to match
        (folder / "identity.json").write_text(json.dumps(recorded))
        with pytest.raises(ValueError, match=f"{scores}: .*{refusal}"):
            ReferenceScores.load(folder, identity, val_positions)

    good.save(folder, identity)
    (folder / "identity.json").write_text(json.dumps(identity))  # no hash of the scores recorded
    with pytest.raises(ValueError, match=f"{folder / 'identity.json'} records no sha256"):
        ReferenceScores.load(folder, identity, val_positions)


@slow
def test_a_resumed_dpo_run_refuses_reference_scores_replaced_in_its_folder(dpo_inputs, tmp_path):
    data, base = dpo_inputs
    ckpt = tmp_path / "run"
    run_ok(1, dpo_args(data, base, ckpt, "steps=2", "validation.batches=1"), launcher="python")
    scores = ckpt / "reference" / "scores.pt"
    saved = torch.load(scores, weights_only=True)
    torch.save(saved | {"logps": {k: torch.zeros_like(v) for k, v in saved["logps"].items()}}, scores)
    rc, metrics, stderr = launch(1, dpo_args(data, base, ckpt, "steps=3", "validation.batches=1"), launcher="python")
    assert rc != 0 and metrics == []
    assert f"{scores} is not the file" in stderr, stderr[-4000:]
