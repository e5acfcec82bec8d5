"""The training assets: DeepSpeed under torchrun through Dagster Pipes, checkpoints as partitions, resume."""

import json
import re
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.tokens.packing import PackingConfig, ShardTokens, pack, write_packed
from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
from lm_assets.defs.training.assets import TrainingLauncher, training_run_and_checkpoint
from lm_assets.storage.store import Storage

pytestmark = pytest.mark.slow

SENTENCES = [
    "The river flows past the old mill and under the stone bridge.",
    "河水流过老磨坊，从石桥下面穿过。",
    "Every morning the baker opens the shop at six o'clock.",
    "每天早上六点，面包师傅准时开门营业。",
] * 20


@pytest.fixture
def packed_storage(tmp_path):
    """A storage root holding a tokenizer and a small packed dataset made from its tokens."""
    root = tmp_path / "storage"
    trained = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=400, num_threads=1), tmp_path / "tok")
    store = Storage(str(root))
    store.write_bytes("tokenizer/tokenizer.model", trained.model)
    sp = trained.processor()
    docs = [np.array(sp.encode(s), dtype=np.uint16) for s in SENTENCES * 4]
    tokens = np.concatenate(docs)
    lengths = np.array([len(d) for d in docs])
    index = pl.DataFrame({
        "doc_id": [f"d{i}" for i in range(len(docs))],
        "offset": np.concatenate(([0], np.cumsum(lengths)[:-1])),
        "length": lengths,
    })
    result = pack([ShardTokens("s0", tokens, index, tokenizer_hash=trained.hash)], PackingConfig(seq_len=33, val_fraction=0.1))
    write_packed(result, root / "packed")
    return root


def run_training(root, instance, steps):
    resources = {
        "storage": StorageResource(root=str(root), s3=s3_resource_from_env()),
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    config = {"ops": {"training_run": {"config": {"steps": steps, "save_every": 3, "micro_batch_size": 2, "pp": 2, "warmup_steps": 4,
                                              "lr": 3e-3, "zero_stage": 1}}}}
    return dg.materialize([training_run_and_checkpoint], instance=instance, resources=resources, run_config=config)


def test_training_through_pipes_then_resume(packed_storage):
    instance = dg.DagsterInstance.ephemeral()
    first = run_training(packed_storage, instance, steps=6)
    assert first.success
    run_meta = first.asset_materializations_for_node("training_run")
    by_key = {m.asset_key.path[-1]: m.metadata for m in run_meta}
    assert by_key["training_run"]["steps"].value == 6
    assert by_key["training_run"]["resumed_from_step"].value == 0
    # Said once: the layout in training_plan, the curve drawn as `curves`; nothing unset is shown.
    assert not {"layout", "loss_curve", "compile_mode"} & set(by_key["training_run"])
    assert "| dp=1 tp=1 pp=2 ZeRO-1 |" in by_key["training_run"]["training_plan"].value
    assert all(entry.value is not None for entry in by_key["training_run"].values())
    assert by_key["checkpoint"]["tags"].value == ["step_00000003", "step_00000006"]
    assert instance.get_dynamic_partitions(checkpoint_partitions.name) == ["main-step_00000003", "main-step_00000006"]
    progress = [e.user_message for e in instance.all_logs(first.run_id) if e.user_message.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["1/6", "6/6"]  # the first step, then every 10th and the last
    run = by_key["training_run"]
    assert run["warmup_steps_left_out"].value == 4 and run["steps_averaged"].value == 2  # warmup_steps 4 of 6
    assert run["tokens_per_s"].value > 0 and run["step_time_s_mean"].value > 0
    assert run["mfu"].value.startswith("n/a: no peak FLOP/s known for this device; set `peak_flops` in training_run's config")
    assert "H200 989e12" in run["mfu"].value
    # How it computed: CPU defaults (no compile, document masks, torch's norm, dense-masked SDPA).
    assert run["compiled"].value is False and run["document_mask"].value is True
    assert run["kernels"].value == {"rms_norm": "torch", "rope": "eager", "swiglu": "eager", "cross_entropy": "eager",
                                    "attention": "sdpa", "fused_adamw": True}  # fmt: skip
    assert run["first_step_s"].value > 0 and "peak_memory_gib" not in run
    measured = run["model_states_measured_mib"].value  # rank 0's tensors before an optimizer step, beside the estimate
    assert 0 < measured < 50 and f"| {measured / 1024:.3f} GiB |" in run["training_plan"].value
    png = Path(run["curves_png"].value)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "data:image/png;base64," in run["curves_detail"].value
    # The curves drawn in place on the overview: an SVG image short enough for the UI to render inline.
    curves = run["curves"].value
    assert list(run)[:4] == ["curves", "final_loss", "min_loss", "min_loss_step"]  # the overview opens with the story
    assert curves.startswith("![loss](data:image/svg+xml,") and len(curves) < 1000
    assert run["lr_curve"].value.startswith("![lr](data:image/svg+xml,") and len(run["lr_curve"].value) < 1000
    # A validation loss at each checkpoint (steps 3 and 6), on the packed val split, in the curves too.
    vals = tensorboard_scalars(run["tensorboard_logdir"].value, "val/loss")
    assert [step for step, _ in vals] == [3, 6] and all(np.isfinite([v for _, v in vals]))
    assert abs(run["val_loss"].value - vals[-1][1]) <= 5e-5 and run["val_loss_step"].value == 6 and "validation" not in run
    assert f"val loss {vals[-1][1]:.3f} at step 6" in curves
    steps = [json.loads(line) for line in Path(run["steps_jsonl"].value).read_text().splitlines()]
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5, 6] and "val_loss" in steps[2] and "val_loss" not in steps[3]
    # The checkpoint: its step, losses, size, parameters, layout and export, and every checkpoint in a table.
    ckpt = by_key["checkpoint"]
    assert ckpt["step"].value == 6 and abs(ckpt["val_loss"].value - vals[-1][1]) <= 5e-5
    assert abs(ckpt["train_loss"].value - run["final_loss"].value) <= 1e-4
    assert ckpt["layout"].value == "pp=2 tp=1 dp=1 (ZeRO-1, fp32)"
    assert re.fullmatch(r"\d{1,3}(,\d{3})+", ckpt["parameters"].value)  # thousands separated: 9,736,176
    assert int(ckpt["checkpoint_bytes"].value.replace(",", "")) > int(ckpt["parameters"].value.replace(",", "")) * 4
    table = ckpt["checkpoints"].value.splitlines()
    assert table[0] == "| checkpoint | step | train loss | val loss | size |" and len(table) == 4
    losses = tensorboard_scalars(run["tensorboard_logdir"].value, "train/loss")
    assert [step for step, _ in losses] == [1, 2, 3, 4, 5, 6] and all(np.isfinite([v for _, v in losses]))
    assert abs(losses[-1][1] - run["final_loss"].value) <= 5e-5  # metadata holds four decimals
    low_step, low = min(losses, key=lambda item: (item[1], item[0]))
    assert run["min_loss_step"].value == low_step and abs(run["min_loss"].value - low) <= 5e-5
    last, before = np.mean([v for _, v in losses[-1:]]), np.mean([v for _, v in losses[-2:-1]])  # 6 steps: fifths of 1
    rose = re.fullmatch(r"yes: the last 1 steps averaged (\d+\.\d{4}), the 1 before them (\d+\.\d{4})",
                        run["loss_rose_at_end"].value)
    if last > before:  # both means said, as the losses logged give them
        assert rose and abs(float(rose[1]) - last) <= 1e-4 and abs(float(rose[2]) - before) <= 1e-4
    else:
        assert run["loss_rose_at_end"].value == "no"
    assert table[2].startswith(f"| step_00000003 | 3 | {losses[2][1]:.4f} | {vals[0][1]:.4f} | ")

    hf_dir = by_key["checkpoint"]["hf_export"].value
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(hf_dir)
    assert model.config.num_hidden_layers >= 1
    # The exported tokenizer gives the ids the model was trained on, and decodes them back to the text.
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(packed_storage / "tokenizer" / "tokenizer.model"))
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    for sentence in SENTENCES[:2]:
        ids = sp.encode(sentence)
        assert tokenizer(sentence, add_special_tokens=False)["input_ids"] == ids
        assert tokenizer.decode(ids) == sentence

    second = run_training(packed_storage, instance, steps=9)
    meta = {m.asset_key.path[-1]: m.metadata for m in second.asset_materializations_for_node("training_run")}
    assert meta["training_run"]["resumed_from_step"].value == 6
    assert meta["training_run"]["steps"].value == 9
    assert "main-step_00000009" in instance.get_dynamic_partitions(checkpoint_partitions.name)
    resumed = tensorboard_scalars(meta["training_run"]["tensorboard_logdir"].value, "train/loss")
    assert [step for step, _ in resumed] == list(range(1, 10))  # the resumed run appends to the same folder


def tensorboard_scalars(folder: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder)
    events.Reload()
    return sorted((e.step, e.value) for e in events.Scalars(tag))


def test_a_failing_rank_fails_the_asset_with_its_error(packed_storage):
    instance = dg.DagsterInstance.ephemeral()
    resources = {
        "storage": StorageResource(root=str(packed_storage), s3=s3_resource_from_env()),
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    bad = {"ops": {"training_run": {"config": {"steps": 2, "pp": 2, "zero_stage": 2}}}}
    result = dg.materialize([training_run_and_checkpoint], instance=instance, resources=resources, run_config=bad, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.event_specific_data.error.to_string()
    # Every rank refuses the config; whichever exits first takes the others down, so any may be the one reported.
    assert re.search(r"training failed on rank_0000[01]: ValueError: ZeRO stage 2 with pipeline parallelism \(pp=2\) is refused", message)



def test_continued_pretraining_from_a_hugging_face_llama_with_its_tokenizer_extended(tmp_path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    from lm_assets.corpus.tokens.tokenizer import load_tokenizer
    from lm_assets.defs.tokens.assets import packed_dataset, tokenized_shard, tokenizer
    from tests.support.tiny_llama import llama_style_tokenizer, tiny_hf_llama

    base = llama_style_tokenizer(SENTENCES)
    n = load_tokenizer(base).get_piece_size()
    folder = tiny_hf_llama(tmp_path / "llama", n, base)
    root = tmp_path / "storage"
    Storage(str(root)).write_parquet("decontaminated/s0/documents.parquet", pl.DataFrame({
        "doc_id": [f"d{i}" for i in range(len(SENTENCES) * 2)], "text": [s + " The mill stands." for s in SENTENCES * 2],
        "lang": ["en", "zh"] * len(SENTENCES), "source": ["web"] * (len(SENTENCES) * 2),
        "quality_score": [0.9] * (len(SENTENCES) * 2),
    }))  # fmt: skip
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s0"])
    storage = StorageResource(root=str(root), s3=s3_resource_from_env())
    adopted = dg.materialize([tokenizer], instance=instance, resources={"storage": storage}, run_config={
        "ops": {"tokenizer": {"config": {"adopt_from": str(folder), "extra_pieces": ["millstone", "磨坊", "baker"]}}}})
    meta = adopted.asset_materializations_for_node("tokenizer")[0].metadata
    added = meta["added_pieces"].value
    assert meta["vocab_size"].value == n + len(added) and "millstone" in added and meta["base_vocab_size"].value == n
    assert adopted.get_asset_check_evaluations()[0].passed  # decode(encode(x)) == x with Llama's dummy prefix too
    assert dg.materialize([tokenized_shard], instance=instance, resources={"storage": storage}, partition_key="s0").success
    packed = dg.materialize([packed_dataset], instance=instance, resources={"storage": storage},
                            run_config={"ops": {"packed_dataset": {"config": {"seq_len": 33, "val_fraction": 0.1}}}})  # fmt: skip
    assert packed.success
    manifest = json.loads((root / "packed" / "manifest.json").read_text())
    assert (manifest["eos_id"], manifest["pad_id"]) == (2, 0)  # the adopted tokenizer's, not the project's 3 and 0

    resources = {"storage": storage, "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
                 "pipes_subprocess_client": dg.PipesSubprocessClient()}  # fmt: skip
    config = {"ops": {"training_run": {"config": {"steps": 2, "micro_batch_size": 2, "warmup_steps": 1, "lr": 1e-3,
                                              "overrides": [f"init_from={folder}"]}}}}  # fmt: skip
    trained = dg.materialize([training_run_and_checkpoint], instance=instance, resources=resources, run_config=config)
    by_key = {m.asset_key.path[-1]: m.metadata for m in trained.asset_materializations_for_node("training_run")}
    assert by_key["training_run"]["init_from"].value["vocab_rows_added"] == len(added)
    hf_dir = by_key["checkpoint"]["hf_export"].value
    model = LlamaForCausalLM.from_pretrained(hf_dir)
    assert model.config.vocab_size == n + len(added) and model.config.hidden_size == 64
    ids = AutoTokenizer.from_pretrained(hf_dir)("the millstone turns")["input_ids"]
    assert n + added.index("millstone") in ids
    assert by_key["training_run"]["final_loss"].value > 0

    # The exported checkpoint as the reference model of a perplexity curriculum: its loss on each training
    # sequence is the sequence's difficulty, and the first epoch starts with the ones it finds easiest.
    from lm_assets.corpus.tokens.packing import PackingConfig as Packing
    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.perplexity import sequence_losses
    from lm_assets.training.data import PackedDataset

    def pack_with(reference, **kw):
        settings = {"seq_len": 33, "val_fraction": 0.1, "curriculum": "perplexity", "curriculum_reference": str(reference)}
        return dg.materialize([packed_dataset], instance=instance, resources={"storage": storage}, raise_on_error=False,
                              run_config={"ops": {"packed_dataset": {"config": settings | kw}}})  # fmt: skip

    scored = pack_with(hf_dir)
    assert scored.success
    manifest = json.loads((root / "packed" / "manifest.json").read_text())
    assert manifest["curriculum"]["score"] == "perplexity" and manifest["curriculum"]["reference"] == str(hf_dir)
    assert manifest["curriculum"]["reference_device"] == "cpu" and len(manifest["curriculum"]["reference_weights_sha256"]) == 64
    difficulty = np.fromfile(root / "packed" / "train_difficulty.bin", dtype="<f4")
    rows = np.memmap(root / "packed" / "train.bin", dtype=manifest["dtype"], mode="r").reshape(-1, 33)
    expected = sequence_losses(load_model(hf_dir), lambda lo, hi: rows[lo:hi], len(rows), manifest["pad_id"])
    assert len(difficulty) == len(rows) and np.allclose(difficulty, expected) and difficulty.std() > 0
    from lm_assets.evaluation.perplexity import packed_perplexity

    whole = packed_perplexity(load_model(hf_dir), root / "packed", "train")  # the token-weighted mean of the row losses
    counts = (rows[:, 1:] != manifest["pad_id"]).sum(axis=1)
    assert (difficulty * counts).sum() / counts.sum() == pytest.approx(whole["nll_per_token"], rel=1e-5)
    dataset = PackedDataset(root / "packed", "train")
    head = round(Packing().curriculum_fraction * len(dataset))
    assert np.all(np.diff(difficulty[dataset.first_epoch[:head]]) >= 0)
    refused = pack_with(folder)  # the original checkpoint lacks the added pieces
    assert not refused.success and "another tokenizer than the corpus" in str(refused.all_events)
    assert "go together" in str(pack_with("", curriculum="perplexity").all_events)
