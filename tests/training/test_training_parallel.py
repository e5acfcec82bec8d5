"""The training program across parallel layouts, on CPU with gloo.

Fast tests check the config, the schedule and the spike detector in-process. The `slow` ones
launch real jobs (`torchrun`, the `deepspeed` launcher, or a lone `python -m lm_assets.training.train`) on a
tiny model and a tiny packed dataset written here, and read the per-step JSON lines rank 0 prints:

- pp=2 x tp=2 x dp=2 (8 processes) trains (the loss goes down) and matches a single process on
  the same global batches within 1e-3 per step, and so do the consolidated final weights;
- a job killed after its step-5 checkpoint resumes to step 10 with losses identical to a job
  never interrupted (pipeline + tensor parallel, ZeRO-1);
- an injected loss spike (x100) and a NaN loss skip their updates, leaving weights, optimizer
  state and learning rate as they were (pipeline engine and plain ZeRO-2 engine);
- too many consecutive spikes stop the job with a non-zero exit and the reason on stderr.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
SEQ_LEN = 33  # rows of 33 tokens: 32 inputs and 32 targets
VOCAB = 300
TIMEOUT = 240

slow = pytest.mark.slow


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def write_packed(path: Path, n_seq: int = 256, seed: int = 0) -> Path:
    """A packed dataset in the packing stage's layout: `train.bin` ([n_seq, SEQ_LEN] uint16,
    little-endian) and `manifest.json`. Rows are arithmetic sequences mod the vocabulary, so a
    tiny model learns them within a few steps, each cut in two documents by an EOS (id 3), so that
    document masking changes what a token sees."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    start = rng.integers(4, VOCAB, size=(n_seq, 1))
    stride = rng.integers(1, 4, size=(n_seq, 1))
    rows = (start + stride * np.arange(SEQ_LEN)) % (VOCAB - 4) + 4
    rows[np.arange(n_seq), rng.integers(8, SEQ_LEN - 8, size=n_seq)] = 3
    rows.astype("<u2").tofile(path / "train.bin")
    manifest = {
        "format": "lm-assets-packed/1",
        "dtype": "uint16",
        "byte_order": "little",
        "seq_len": SEQ_LEN,
        "eos_id": 3,
        "pad_id": 0,
        "inputs": [{"shard": "synthetic", "version": {"vocab_size": VOCAB}}],
        "splits": {"train": {"sequences": n_seq}},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def launch(
    nproc: int, overrides: list[str], launcher: str = "torchrun", summaries: list | None = None
) -> tuple[int, list[dict], str]:
    """Run a training job; returns (exit status, rank 0's per-step metrics, stderr). The run's
    final summary is appended to `summaries` when given."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    port = str(free_port())
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", port]
        cmd += ["-m", "lm_assets.training.train"]
    elif launcher == "deepspeed":
        cmd = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_nodes", "1", "--num_gpus", str(nproc)]
        cmd += ["--master_port", port, "--module", "lm_assets.training.train"]
    else:
        assert launcher == "python" and nproc == 1
        cmd = [sys.executable, "-m", "lm_assets.training.train"]
    proc = subprocess.run(cmd + overrides, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    metrics = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "step" in record and "loss" in record:
                metrics.append(record)
            elif "summary" in record and summaries is not None:
                summaries.append(record["summary"])
    return proc.returncode, metrics, proc.stderr


def run_ok(nproc: int, overrides: list[str], launcher: str = "torchrun", summaries: list | None = None) -> list[dict]:
    rc, metrics, stderr = launch(nproc, overrides, launcher, summaries)
    assert rc == 0, stderr[-4000:]
    return metrics


def losses(metrics: list[dict]) -> list[float]:
    return [m["loss"] for m in metrics]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_packed(tmp_path_factory.mktemp("packed"))


def base(data: Path, steps: int, **extra) -> list[str]:
    settings = {"data": str(data), "steps": steps, "optim.lr": 3e-3, "optim.warmup_steps": 3, "seed": 1234} | extra
    return [f"{k}={v}" for k, v in settings.items()]


# ---------------------------------------------------------------------------------------------
# Config, schedule, spike detector (in-process)
# ---------------------------------------------------------------------------------------------


def test_config_validation_refuses_unsupported_combinations():
    from lm_assets.training.config import TrainConfig, load_config

    def cfg(*overrides):
        return load_config(None, ["data=/nowhere", *overrides])

    cfg().validate(world_size=4)  # defaults: 1 x 1 x 4
    with pytest.raises(ValueError, match="fp16 with ZeRO stage 0"):
        cfg("precision=fp16", "zero_stage=0").validate()
    cfg("precision=fp16", "zero_stage=1").validate()
    for stage in (2, 3):
        with pytest.raises(ValueError, match=f"ZeRO stage {stage} with pipeline parallelism"):
            cfg("parallel.pp=2", f"zero_stage={stage}").validate()
        cfg("parallel.pp=1", f"zero_stage={stage}").validate()
    with pytest.raises(ValueError, match="does not match the world size"):
        cfg("parallel.pp=2", "parallel.tp=2", "parallel.dp=2").validate(world_size=4)
    with pytest.raises(ValueError, match="not a multiple"):
        cfg("parallel.pp=3").validate(world_size=4)
    with pytest.raises(ValueError, match="precision"):
        cfg("precision=fp8").validate()
    with pytest.raises(ValueError, match="needs checkpoint.dir"):
        cfg("checkpoint.save_every=5").validate()
    with pytest.raises(ValueError, match="step:factor"):
        cfg("debug.loss_scale=7").validate()
    with pytest.raises(KeyError, match="no field"):
        cfg("parallel.ep=2")
    assert cfg("parallel.pp=2", "parallel.tp=2").dims(8).dp == 2
    assert cfg("debug.loss_scale=3:nan,5:100").debug.loss_scales()[5] == 100.0
    assert math.isnan(cfg("debug.loss_scale=3:nan").debug.loss_scales()[3])
    assert isinstance(cfg(), TrainConfig)


def test_model_split_checks():
    from lm_assets.training.config import ParallelDims, from_preset

    tiny = from_preset("tiny", VOCAB)  # 4 heads, 2 kv heads, ffn 176, 2 layers
    ParallelDims(pp=2, tp=2, dp=2).check_model(tiny)
    with pytest.raises(ValueError, match="must divide model n_kv_heads"):
        ParallelDims(tp=4).check_model(tiny)
    with pytest.raises(ValueError, match="exceeds the model's 2 layers"):
        ParallelDims(pp=4).check_model(tiny)


def test_config_files_and_generated_deepspeed_json(tmp_path):
    from lm_assets.training.config import load_config
    from lm_assets.training.engine import adamw, deepspeed_config

    toml = tmp_path / "run.toml"
    toml.write_text('data = "/d"\nprecision = "bf16"\nzero_stage = 1\nmodel_overrides = ["n_layers=4"]\n'
                    "micro_batch_size = 2\ngrad_accum = 3\n[parallel]\npp = 2\n[optim]\nlr = 1e-3\n")  # fmt: skip
    cfg = load_config(toml, ["optim.grad_clip=0.5"])
    cfg.validate(world_size=4)
    assert cfg.model_config(VOCAB).n_layers == 4
    ds = deepspeed_config(cfg, dp=cfg.dims(4).dp)
    assert ds["train_batch_size"] == 2 * 3 * 2
    assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert ds["zero_optimization"]["stage"] == 1
    assert ds["gradient_clipping"] == 0.5
    assert "optimizer" not in ds  # ours: torch's AdamW, handed to deepspeed.initialize
    opt = adamw([{"params": [torch.nn.Parameter(torch.zeros(2, 2))]}], cfg)
    assert opt.defaults["lr"] == 1e-3 and opt.defaults["fused"] is True and opt.defaults["betas"] == (0.9, 0.95)
    cfg.kernels.fused_adamw = False
    assert not adamw([{"params": [torch.nn.Parameter(torch.zeros(2, 2))]}], cfg).defaults["fused"]
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"data": "/d", "spike": {"k_sigma": 3.0}}))
    assert load_config(as_json).spike.k_sigma == 3.0


def test_lr_schedule_warmup_then_cosine():
    from lm_assets.training.engine import lr_lambda

    f = lr_lambda(warmup_steps=4, total_steps=14, min_ratio=0.1)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(9) == pytest.approx(0.55)
    assert f(14) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(4, 20))


def test_spike_detector_window_and_consecutive_limit():
    from lm_assets.training.config import SpikeConfig
    from lm_assets.training.engine import LossSpikeError, SpikeDetector

    det = SpikeDetector(SpikeConfig(k_sigma=3.0, window=5, min_history=3, max_consecutive=2))
    assert det.check(100.0) is None  # no history yet: only non-finite losses count
    assert "non-finite" in det.check(float("nan")) and "non-finite" in det.check(float("inf"))
    for step, loss in enumerate([5.0, 4.9, 5.1, 5.0]):
        assert det.check(loss) is None
        det.record(loss, None, step)
    assert det.check(5.2) is None
    reason = det.check(9.0)
    assert reason and "mean" in reason
    det.record(9.0, reason, 10)  # one spike: tolerated, not added to the window
    assert det.consecutive == 1 and list(det.history) == [5.0, 4.9, 5.1, 5.0]
    state = det.state_dict()
    with pytest.raises(LossSpikeError, match="2 consecutive loss spikes"):
        det.record(float("nan"), "non-finite loss nan", 11)
    det.load_state_dict(state)
    det.record(5.0, None, 11)
    assert det.consecutive == 0 and det.total == 1 and len(det.history) == 5


# ---------------------------------------------------------------------------------------------
# Multi-process jobs
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layout_runs(data, tmp_path_factory):
    """20 steps at pp=2 x tp=2 x dp=2 (ZeRO-1) and at 1 x 1 x 1 (plain engine, ZeRO-0, the same
    4 sequences per step as 2 accumulated micro-batches of 2), each saving a final checkpoint."""
    ckpt = tmp_path_factory.mktemp("ckpt")
    three_d = run_ok(8, base(data, 20, micro_batch_size=2, zero_stage=1, **{
        "parallel.pp": 2, "parallel.tp": 2, "parallel.dp": 2, "checkpoint.dir": ckpt / "3d"}))  # fmt: skip
    single = run_ok(1, base(data, 20, micro_batch_size=2, grad_accum=2, peak_flops=1e11, **{
        "checkpoint.dir": ckpt / "single"}), launcher="python")  # fmt: skip
    return three_d, single, ckpt


@slow
def test_pp2_tp2_dp2_trains(layout_runs):
    three_d, _, _ = layout_runs
    assert [m["step"] for m in three_d] == list(range(1, 21))
    loss = losses(three_d)
    assert all(math.isfinite(x) for x in loss)
    assert np.mean(loss[-5:]) < np.mean(loss[:5]) - 0.3, loss
    assert not any(m["skipped"] for m in three_d)
    for m in three_d:
        assert m["grad_norm"] > 0 and m["tokens_per_s"] > 0 and m["lr"] > 0
        assert m["tokens"] == m["step"] * 4 * (SEQ_LEN - 1)  # 2 sequences x dp 2
        assert m["mfu"] is None  # no peak_flops given


@slow
def test_single_process_reports_mfu(layout_runs):
    from lm_assets.training.config import from_preset
    from lm_assets.training.model import flops_per_token

    _, single, _ = layout_runs
    for m in single:
        expected = flops_per_token(from_preset("tiny", VOCAB), SEQ_LEN - 1) * m["tokens_per_s"] / 1e11
        assert m["mfu"] == pytest.approx(expected)


@slow
def test_pp2_tp2_dp2_matches_single_process(layout_runs):
    from lm_assets.training.checkpoint import consolidated_state_dict

    three_d, single, ckpt = layout_runs
    np.testing.assert_allclose(losses(three_d), losses(single), rtol=0, atol=1e-3)
    np.testing.assert_allclose([m["grad_norm"] for m in three_d], [m["grad_norm"] for m in single], rtol=1e-3)
    assert [m["lr"] for m in three_d] == pytest.approx([m["lr"] for m in single])
    # The pipeline layer files and tensor-parallel shards gather into the single process's weights.
    a, b = consolidated_state_dict(ckpt / "3d"), consolidated_state_dict(ckpt / "single")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].shape == b[name].shape, name
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=2e-3, msg=name)
    from lm_assets.training.checkpoint import model_config
    from lm_assets.training.model import Transformer

    assert model_config(ckpt / "3d") == model_config(ckpt / "single")
    model = Transformer(model_config(ckpt / "3d"), seed=None)
    model.load_state_dict(a, strict=True)
    for sub in ("3d", "single"):
        written = json.loads((ckpt / sub / "step_00000020" / "ds_config.json").read_text())
        assert "optimizer" not in written
        train_config = json.loads((ckpt / sub / "step_00000020" / "train_config.json").read_text())
        assert train_config["kernels"]["fused_adamw"] is True and train_config["document_mask"] is True


@slow
def test_resume_after_kill_matches_uninterrupted(data, tmp_path):
    """pp=2 x tp=2 (ZeRO-1): a run that dies after its step-5 checkpoint, resumed, reproduces an
    uninterrupted run exactly. The dying run goes through the deepspeed launcher."""
    common = base(data, 10, micro_batch_size=2, zero_stage=1, **{"parallel.pp": 2, "parallel.tp": 2})
    reference = run_ok(4, common)
    ckpt = [f"checkpoint.dir={tmp_path / 'ckpt'}", "checkpoint.save_every=5"]
    rc, before, stderr = launch(4, common + ckpt + ["debug.fail_at_step=7", "debug.fail_rank=3"], launcher="deepspeed")
    assert rc != 0
    assert "injected failure before step 7 on rank 3" in stderr
    assert [m["step"] for m in before] == list(range(1, 8))
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == "step_00000005"
    after = run_ok(4, common + ckpt)
    assert [m["step"] for m in after] == list(range(6, 11))
    assert losses(before) == losses(reference)[:7]
    assert losses(after) == losses(reference)[5:]
    assert [m["lr"] for m in after] == [m["lr"] for m in reference][5:]


def _tensors(obj, prefix=""):
    """Every tensor in a nested checkpoint object, by path."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")


@slow
@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(["parallel.pp=2", "zero_stage=1"], id="pipeline-zero1"),
        pytest.param(["parallel.dp=2", "zero_stage=2"], id="plain-zero2"),
    ],
)
def test_loss_spike_skips_update(data, tmp_path, layout):
    """A NaN loss at step 6 and a x100 loss at step 10 (k-sigma) are skipped: checkpoints before
    and after the x100 step hold the same weights and optimizer state (DeepSpeed itself would
    apply that update), and the lr does not move."""
    ckpt = tmp_path / "ckpt"
    overrides = base(data, 11, micro_batch_size=2, **{
        "spike.min_history": 4, "spike.k_sigma": 4, "debug.loss_scale": "6:nan,10:100",
        "checkpoint.dir": ckpt, "checkpoint.save_every": 10}) + layout  # fmt: skip
    metrics = run_ok(2, overrides)
    assert [m["step"] for m in metrics if m["skipped"]] == [7, 11]
    assert "non-finite" in metrics[6]["spike_reason"] and "mean" in metrics[10]["spike_reason"]
    assert metrics[10]["loss"] > 50 * metrics[9]["loss"]
    assert metrics[7]["lr"] == metrics[6]["lr"]  # the schedule did not advance on the skip
    assert all(math.isfinite(m["loss"]) for m in metrics[7:10])  # no NaN leaked into the weights
    assert metrics[9]["loss"] < metrics[0]["loss"]

    from lm_assets.training.checkpoint import consolidated_state_dict

    before, after = ckpt / "step_00000010", ckpt / "step_00000011"
    w0, w1 = consolidated_state_dict(ckpt, before.name), consolidated_state_dict(ckpt, after.name)
    for name in w0:
        assert torch.equal(w0[name], w1[name]), name
    optim_files = sorted(p.name for p in before.glob("*optim_states.pt"))
    assert optim_files
    for name in optim_files:
        s0 = dict(_tensors(torch.load(before / name, weights_only=False)))
        s1 = dict(_tensors(torch.load(after / name, weights_only=False)))
        assert s0.keys() == s1.keys()
        for key in s0:
            assert torch.equal(s0[key], s1[key]), (name, key)


@slow
def test_consecutive_spikes_stop_the_job(data):
    rc, metrics, stderr = launch(1, base(data, 10, micro_batch_size=2, **{
        "debug.loss_scale": "3:nan,4:nan,5:nan", "spike.max_consecutive": 3}))  # fmt: skip
    assert rc != 0
    assert "LossSpikeError: 3 consecutive loss spikes" in stderr
    assert [m["skipped"] for m in metrics] == [False, False, False, True, True]


def test_fp16_with_loss_scaling_trains_on_the_cpu_accelerator(data):
    """fp16 runs on a machine without a GPU through `lm_assets.training.accelerator`, DeepSpeed's dynamic loss scale included."""
    metrics = run_ok(1, base(data, 8, micro_batch_size=2, zero_stage=1, precision="fp16"), launcher="python")
    loss = losses(metrics)
    assert [m["step"] for m in metrics] == list(range(1, 9))
    assert all(math.isfinite(x) for x in loss) and loss[-1] < loss[0], loss


def test_fp16_loss_scale_settings_reach_deepspeed_and_overflows_are_counted(data, tmp_path):
    """A scale too large for fp16 (2^30) overflows: those steps are skipped and counted, and the scale
    halves until it fits; started at 2^4 nothing overflows. The settings reach DeepSpeed's config."""
    from lm_assets.training.config import load_config
    from lm_assets.training.engine import deepspeed_config

    cfg = load_config(None, ["precision=fp16", "zero_stage=1", "fp16.initial_scale_power=14",
                                    "fp16.loss_scale_window=50", "fp16.hysteresis=1", "fp16.min_loss_scale=0.5"])
    assert {k: deepspeed_config(cfg, 1)["fp16"][k] for k in ("initial_scale_power", "loss_scale_window", "hysteresis",
                                                            "min_loss_scale")} == {
        "initial_scale_power": 14, "loss_scale_window": 50, "hysteresis": 1, "min_loss_scale": 0.5}
    with pytest.raises(ValueError, match="initial_scale_power"):
        load_config(None, ["fp16.initial_scale_power=40"]).validate()
    summaries = []
    huge = run_ok(1, base(data, 6, micro_batch_size=2, zero_stage=1, precision="fp16", **{
        "fp16.initial_scale_power": 30, "fp16.hysteresis": 1, "checkpoint.dir": tmp_path / "huge"}),
        launcher="python", summaries=summaries)
    assert huge[0]["overflow"] and huge[0]["loss_scale"] == 2.0**29  # overflowed at 2^30, halved (hysteresis 1)
    skipped = [m["overflow"] for m in huge]
    assert huge[-1]["overflow_skipped_steps"] == sum(skipped) >= 1 and huge[-1]["loss_scale"] < 2.0**30
    assert summaries[-1]["overflow_skipped_steps"] == sum(skipped)
    small = run_ok(1, base(data, 6, micro_batch_size=2, zero_stage=1, precision="fp16", **{"fp16.initial_scale_power": 4}),
                   launcher="python")
    assert [m["loss_scale"] for m in small] == [16.0] * 6 and not any(m["overflow"] for m in small)


def test_batches_made_ahead_by_the_loader_train_exactly_as_batches_made_on_demand(data):
    summaries = []
    ahead = run_ok(1, base(data, 5, micro_batch_size=2, grad_accum=2, **{"loader.num_workers": 3, "loader.prefetch_steps": 4}),
                   launcher="python", summaries=summaries)
    inline = run_ok(1, base(data, 5, micro_batch_size=2, grad_accum=2, **{"loader.num_workers": 0}), launcher="python")
    assert losses(ahead) == losses(inline)
    assert all(m["data_wait_s"] >= 0 for m in ahead + inline)
    assert summaries[-1]["data_wait_s_mean"] is not None
    # Data packed without a val split: no validation loss, and the summary says why.
    assert summaries[-1]["val_losses"] == [] and summaries[-1]["validation"] == "none: the packed data has no 'val' split with sequences"


def test_compile_mode_reaches_torch_compile_and_cuda_graphs_are_refused_without_cuda(data, monkeypatch):
    import torch

    from lm_assets.training.config import from_preset, load_config
    from lm_assets.training.engine import check_compile_mode
    from lm_assets.training.model import Transformer, compile_blocks

    with pytest.raises(ValueError, match="compile_mode must be one of"):
        load_config(None, ["compile_mode=fastest"]).validate()
    with pytest.raises(ValueError, match="needs compile"):
        load_config(None, ["compile=false", "compile_mode=max-autotune"]).validate()
    with pytest.raises(ValueError, match="captures CUDA graphs, which cpu has not"):
        check_compile_mode("reduce-overhead", True, "cpu")
    assert check_compile_mode("reduce-overhead", True, "cuda") == "reduce-overhead"
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: seen.append(options) or fn)
    model = Transformer(from_preset("tiny", 64))
    assert compile_blocks(model, mode="max-autotune") == len(seen) > 0 and seen[0] == {"mode": "max-autotune"}
    rc, metrics, stderr = launch(1, base(data, 2, micro_batch_size=2, compile="true", compile_mode="reduce-overhead"),
                                 launcher="python")
    assert rc != 0 and metrics == [] and "compile_mode=reduce-overhead captures CUDA graphs" in stderr


def test_a_poisoned_batch_is_recorded_with_its_sequences_and_their_scan(tmp_path):
    """Step 2's sequences are overwritten with one token repeated, and its loss made NaN: spikes.jsonl
    names exactly that step's sequences, finds the degenerate ones, and the summary points at it."""
    from lm_assets.training.data import PackedDataset
    from lm_assets.training.forensics import read_spikes

    data = write_packed(tmp_path / "packed")
    dataset = PackedDataset(data, "train")
    poisoned = [int(i) for i in dataset.batch_indices(2, 0, 1, 2)]
    rows = np.memmap(data / "train.bin", dtype="<u2", mode="r+", shape=(len(dataset), SEQ_LEN))
    rows[poisoned[0]] = 7
    rows.flush()
    summaries = []
    metrics = run_ok(1, base(data, 4, micro_batch_size=2, **{"debug.loss_scale": "2:nan", "checkpoint.dir": tmp_path / "ckpt"}),
                     launcher="python", summaries=summaries)
    assert [m["skipped"] for m in metrics] == [False, False, True, False]
    spikes = read_spikes(tmp_path / "ckpt")
    assert [(row["step"], row["seq_index"]) for row in spikes] == [(2, i) for i in poisoned]
    assert [row["degenerate"] for row in spikes] == [True, False]
    assert spikes[0]["longest_run"] == SEQ_LEN and spikes[0]["longest_run_token"] == 7
    assert summaries[-1]["spiked_steps"] == 1 and summaries[-1]["spike_forensics"].endswith("spikes.jsonl")


def tiny_hf_llama(folder: Path, vocab: int = VOCAB) -> Path:
    from tests.support.tiny_llama import tiny_hf_llama as build

    return build(folder, vocab)


def test_weights_from_a_hugging_face_llama_give_its_logits():
    import tempfile

    import torch
    from transformers import LlamaForCausalLM

    from lm_assets.training.hf_init import load_into, model_config, weights
    from lm_assets.training.model import Transformer

    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny_hf_llama(Path(tmp) / "llama")
        cfg = model_config(folder)
        assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_hidden) == (64, 2, 4, 2, 96)
        ours = Transformer(cfg, seed=0)
        assert load_into(ours, weights(folder), cfg, pipeline=False, tp=1, tp_rank=0) == len(list(ours.parameters()))
        theirs = LlamaForCausalLM.from_pretrained(folder).eval()
        prompt = torch.tensor([[5, 17, 42, 99, 7, 250, 3, 8]])
        with torch.no_grad():
            assert torch.allclose(ours(prompt), theirs(prompt).logits, atol=1e-5)


def test_a_run_continues_from_a_hugging_face_llama_on_two_tensor_parallel_ranks(data, tmp_path):
    """The first step's loss is the checkpoint's own on that batch: every rank loaded its slice."""
    import torch
    from transformers import LlamaForCausalLM

    from lm_assets.training.data import PackedDataset

    folder = tiny_hf_llama(tmp_path / "llama")
    settings = {"init_from": folder, "parallel.tp": 2, "document_mask": "false", "model_overrides": "max_seq_len=64"}
    metrics = run_ok(2, base(data, 2, micro_batch_size=2, **settings))
    x, y = PackedDataset(data, "train").get_batch(0, 0, 1, 2)
    with torch.no_grad():
        logits = LlamaForCausalLM.from_pretrained(folder).eval()(x).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
    assert metrics[0]["loss"] == pytest.approx(float(expected), rel=1e-4)
    from lm_assets.training.config import load_config

    with pytest.raises(ValueError, match="no config.json"):
        load_config(None, ["init_from=/no/such/folder"]).validate()


def test_training_accelerator_skips_the_shared_memory_op_and_allows_fp16():
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    from lm_assets.training.accelerator import SHARED_MEMORY_COMM, TrainingCPUAccelerator

    accelerator = TrainingCPUAccelerator()
    assert accelerator.create_op_builder(SHARED_MEMORY_COMM) is None
    assert CPU_Accelerator().create_op_builder(SHARED_MEMORY_COMM) is not None
    assert accelerator.create_op_builder("CPUAdamBuilder") is not None
    assert accelerator.is_fp16_supported() and accelerator.device_name() == "cpu"


def test_the_training_reference_lists_every_training_option():
    import dataclasses

    from lm_assets.training.config import TrainConfig

    reference = (ROOT / "docs" / "training.md").read_text()

    def leaves(obj, prefix=""):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            yield from leaves(value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(value) else [prefix + f.name]

    missing = [name for name in leaves(TrainConfig()) if f"`{name}`" not in reference]
    assert not missing, f"docs/training.md's options table lacks {missing}"
