"""Training throughput on one GPU: our DeepSpeed engine against a plain-torch bf16 loop on the same model.

Usage::

    bash bench/train_gpu.sh [--model 350m] [--steps 50] [--micro-batch 16] [--deadline-s 200]
    bash bench/train_gpu.sh --dry-run        # CPU, tiny preset, 2 steps: checks the script, not the GPU

`train_gpu.sh` picks the Python (`$PYTHON`, else `python3`) and runs this file. Everything it
needs is on the GPU machine except DeepSpeed and its small dependencies and `dagster-pipes`
(`training.train` imports it); wheels of those in `bench/out/gpu_wheels/` (see bench/README.md)
are installed into a temporary folder, each only when that package is missing or older there.
Nothing is fetched from the network.

A synthetic packed dataset (uniform random token ids, no padding; `seq_len` 2049 gives rows of
2048 tokens) is written to a temporary folder in the layout `training.data.PackedDataset` reads.
Then, on the same model preset, batch and data:

(a) DeepSpeed engine: `python -m training.train data=... model=350m precision=bf16 zero_stage=1
    micro_batch_size=16 steps=50 peak_flops=989e12 spike.k_sigma=0` in a subprocess, unchanged:
    bf16 weights with fp32 master weights and AdamW (ZeRO-1), attention through
    `F.scaled_dot_product_attention`, no torch.compile. Its per-step JSON lines are parsed.
(b) plain torch, compiled (the ceiling): the same `training.model.Transformer` in bf16 with fp32
    master weights held by a fused torch AdamW (what DeepSpeed's bf16 path keeps), the same lr
    schedule and gradient clipping, each transformer block compiled on its own with
    `torch.compile` (regional compilation: one block is compiled and reused by all of them) and
    the head fused with the loss; steps run under `sdpa_kernel(SDPBackend.FLASH_ATTENTION)`.
(c) plain torch, eager: (b) without torch.compile, which separates the engine's own overhead from
    what compilation buys.

Before training, a probe runs the model's attention shape under
`sdpa_kernel(SDPBackend.FLASH_ATTENTION)` alone, which raises if FlashAttention cannot take it;
when it passes, SDPA's default dispatch (path a) picks FlashAttention too, since it tries it first.

Figures: the median over the steps after `--warmup` of the step time (for (a) the engine's own
`step_time_s`, forward to `engine.step()`, data loading excluded; for (b) and (c) the same span,
closed by a device synchronization), tokens/s = micro_batch * (seq_len - 1) / step time, and MFU
= `training.model.flops_per_token` * tokens/s / `--peak-tflops` (989, the H200's dense bf16
peak). `--deadline-s` keeps the whole run inside a budget: the DeepSpeed subprocess gets what is
left less the time (b) needs, and a plain-torch path that no longer fits is skipped (it says so).

The last line printed is one JSON object holding every figure (also written to `--json-out`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

START = time.monotonic()
REPO = Path(__file__).resolve().parent.parent
WHEELS = REPO / "bench" / "out" / "gpu_wheels"
SITE = Path(tempfile.gettempdir()) / "train_gpu_site"
H200_BF16_TFLOPS = 989.0

# Distribution name -> module, for the wheels that may be carried to the GPU machine.
WHEEL_MODULES = {
    "deepspeed": "deepspeed",
    "hjson": "hjson",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic_core",
    "annotated_types": "annotated_types",
    "typing_inspection": "typing_inspection",
    "typing_extensions": "typing_extensions",
    "dagster_pipes": "dagster_pipes",
}

# Used only when dagster-pipes is missing: `training.pipes.reporting` then prints JSON lines as it
# does outside Dagster. The command line (a) runs says so.
PIPES_STUB = (
    "import sys, types; m = types.ModuleType('dagster_pipes');"
    "m.PipesEnvVarParamsLoader = type('PipesEnvVarParamsLoader', (), "
    "{'is_dagster_pipes_process': lambda self: False}); sys.modules['dagster_pipes'] = m;"
    "from training.train import main; main()"
)


def elapsed() -> float:
    return time.monotonic() - START


def say(msg: str = "") -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------------------------


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _older(have: str, want: str) -> bool:
    try:
        from packaging.version import Version

        return Version(have) < Version(want)
    except Exception:  # noqa: BLE001 - an unparsable version: keep what is there
        return False


def prepare_packages(wheel_dir: Path = WHEELS, target: Path = SITE) -> dict:
    """Install the wheels in `wheel_dir` whose package is missing (or older) into `target`, put
    `target` first on this process's and its children's import path; return what was done."""
    done: dict = {"wheel_dir": str(wheel_dir), "installed": [], "kept": {}, "errors": []}
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
    todo = []
    for wheel in wheels:
        dist, version = wheel.name.split("-")[:2]
        if dist not in WHEEL_MODULES:
            continue
        have = _installed_version(dist) or _installed_version(dist.replace("_", "-"))
        if have is None or _older(have, version):
            todo.append((wheel, dist, version, have))
        else:
            done["kept"][dist] = have
    if todo:
        target.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--upgrade", "--target", str(target), *(str(w) for w, *_ in todo)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            # pip missing or unhappy: a wheel is a zip laid out as site-packages.
            done["errors"].append(f"pip install failed ({proc.stderr.strip()[-300:]}); unzipped the wheels instead")
            for wheel, *_ in todo:
                with zipfile.ZipFile(wheel) as z:
                    z.extractall(target)
        for wheel, dist, version, have in todo:
            done["installed"].append(f"{dist}=={version}" + (f" (over {have})" if have else ""))
        sys.path.insert(0, str(target))
        import importlib

        importlib.invalidate_caches()
    path = [str(target)] if todo else []
    os.environ["PYTHONPATH"] = os.pathsep.join([*path, str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return done


def module_available(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# Data and the plain-torch loop (also used by bench/train_cpu.py)
# ---------------------------------------------------------------------------------------------


def write_synthetic_packed(out_dir: str | os.PathLike, n_seq: int, seq_len: int, vocab_size: int,
                           seed: int = 0, split: str = "train") -> Path:  # fmt: skip
    """A packed dataset of `n_seq` rows of `seq_len` uniform random ids in [1, vocab_size) (id 0 is
    the pad id and never occurs), little-endian uint16, with the manifest PackedDataset reads."""
    import numpy as np

    if not 2 <= vocab_size <= 2**16:
        raise ValueError("vocab_size must lie in [2, 65536] for uint16 tokens")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, vocab_size, size=(n_seq, seq_len), dtype=np.uint16)
    rows.astype("<u2").tofile(out / f"{split}.bin")
    manifest = {
        "format": "synthetic",
        "dtype": "uint16",
        "byte_order": "little",
        "seq_len": seq_len,
        "pad_id": 0,
        "eos_id": 1,
        "vocab_size": vocab_size,
        "splits": {split: {"sequences": n_seq}},
        "files": {split: {"bin": f"{split}.bin", "shape": [n_seq, seq_len], "bytes": rows.nbytes}},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


class PlainLoop:
    """One training step of `training.model.Transformer` in plain torch, configured as `Trainer`
    configures DeepSpeed: AdamW with the decay / no-decay groups, the warmup-cosine `LambdaLR`,
    global gradient-norm clipping at `optim.grad_clip`.

    fp32: the parameters are the optimizer's (DeepSpeed's `torch_adam` is `torch.optim.AdamW` with
    its default implementation). bf16: the model runs in bf16 and fp32 master copies are updated
    (fused AdamW on a GPU), then copied back, as DeepSpeed's bf16 path does. `compile=True`
    compiles each block on its own and the head together with the loss.
    """

    def __init__(self, cfg, vocab_size: int, device, precision: str = "fp32", compile: bool = False,
                 fused: bool = False):  # fmt: skip
        import torch

        from training.engine import lr_lambda
        from training.model import Transformer, cross_entropy

        self.torch = torch
        self.model_cfg = cfg.model_config(vocab_size)
        torch.manual_seed(cfg.seed)
        model = Transformer(self.model_cfg, seed=cfg.seed)
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
        self.model = model.to(device=device, dtype=self.dtype)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if self.dtype == torch.float32:
            self.master = self.params
        else:
            self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        o = cfg.optim
        decay = [m for m, p in zip(self.master, self.params) if p.dim() >= 2]
        no_decay = [m for m, p in zip(self.master, self.params) if p.dim() < 2]
        groups = [g for g in ({"params": decay}, {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        kwargs = {"fused": True} if fused else {}
        self.opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                                     weight_decay=o.weight_decay, **kwargs)  # fmt: skip
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lr_lambda(o.warmup_steps, cfg.steps, o.min_lr_ratio)
        )
        self.grad_clip = o.grad_clip

        m = self.model

        def head_loss(h, y):
            return cross_entropy(m.head(h), y)

        if compile:
            import torch._dynamo

            torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
            for layer in m.layers:
                layer.compile()
            head_loss = torch.compile(head_loss)
        self.head_loss = head_loss

    def loss(self, x, y):
        h = self.model.embed(x)
        for layer in self.model.layers:
            h = layer(h)
        return self.head_loss(h, y)

    def step(self, x, y):
        """One update; returns the loss tensor (not synchronized)."""
        torch = self.torch
        loss = self.loss(x, y)
        loss.backward()
        if self.master is not self.params:
            for mp, p in zip(self.master, self.params):
                mp.grad = p.grad.float()
                p.grad = None
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.master, self.grad_clip)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        if self.master is not self.params:
            with torch.no_grad():
                torch._foreach_copy_([p.data for p in self.params], self.master)
        return loss.detach()


# ---------------------------------------------------------------------------------------------
# The paths
# ---------------------------------------------------------------------------------------------


def median(xs):
    return statistics.median(xs) if xs else None


def summarize(step_times: list[float], tokens_per_step: int, warmup: int, model_cfg, seq_len: int,
              peak: float) -> dict:  # fmt: skip
    from training.model import flops_per_token

    timed = step_times[warmup:] if len(step_times) > warmup else step_times[-1:]
    med = median(timed)
    tps = tokens_per_step / med if med else None
    return {
        "steps": len(step_times),
        "timed_steps": len(timed),
        "step_ms": round(med * 1e3, 2) if med else None,
        "step_ms_min": round(min(timed) * 1e3, 2) if timed else None,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": round(tps, 1) if tps else None,
        "mfu": round(flops_per_token(model_cfg, seq_len) * tps / peak, 4) if tps else None,
    }


def flash_probe(model_cfg, micro_batch: int, seq_len: int, device: str) -> dict:
    """Run the model's attention shape under `sdpa_kernel(FLASH_ATTENTION)` alone."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {"flash_sdp_enabled": bool(torch.backends.cuda.flash_sdp_enabled())}
    shape = (micro_batch, model_cfg.n_heads, seq_len, model_cfg.head_dim)
    q = torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        out["flash_attention_runs"] = True
    except RuntimeError as exc:
        out["flash_attention_runs"] = False
        out["flash_error"] = str(exc).splitlines()[0][:300]
    return out


def deepspeed_path(args, data_dir: Path, vocab: int, timeout_s: float) -> dict:
    """(a): `python -m training.train` in a subprocess; its step lines parsed."""
    from training.config import TrainConfig

    overrides = [f"data={data_dir}", f"model={args.model}", f"precision={args.precision}", "zero_stage=1",
                 f"micro_batch_size={args.micro_batch}", f"steps={args.steps}",
                 f"peak_flops={args.peak_tflops * 1e12:g}", "spike.k_sigma=0"]  # fmt: skip
    result: dict = {"path": "deepspeed engine (python -m training.train)", "status": "skipped"}
    if not module_available("deepspeed"):
        result["reason"] = f"deepspeed is not installed for {sys.executable} and no wheel of it in {WHEELS}"
        return result
    if module_available("dagster_pipes"):
        cmd = [sys.executable, "-m", "training.train", *overrides]
    else:
        cmd = [sys.executable, "-c", PIPES_STUB, *overrides]
        result["note"] = "dagster-pipes missing: training.train.main() run with a stub dagster_pipes module"
    result["command"] = "python -m training.train " + " ".join(overrides)
    env = dict(os.environ)
    env["DS_ACCELERATOR"] = "cpu" if args.device == "cpu" else "cuda"
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    say(f"\n(a) deepspeed engine: {result['command']}  (timeout {timeout_s:.0f} s)")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = "timeout"
    result["wall_s"] = round(time.monotonic() - t0, 1)
    steps = []
    for line in stdout.splitlines():
        if line.startswith("{") and '"step_time_s"' in line:
            try:
                steps.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    result["returncode"] = rc
    if rc != 0 or not steps:
        result["status"] = "failed" if rc != "timeout" else "timed out"
        tail = "\n".join((stderr or "").strip().splitlines()[-25:])
        result["reason"] = f"exit {rc}, {len(steps)} step lines; stderr tail:\n{tail}"
        say(f"    {result['status']}: exit {rc}; stderr tail:\n{tail}")
        if not steps:
            return result
    else:
        result["status"] = "ran"
    cfg = TrainConfig(model=args.model)
    model_cfg = cfg.model_config(vocab)
    tokens_per_step = args.micro_batch * (args.seq_len - 1)
    result.update(summarize([s["step_time_s"] for s in steps], tokens_per_step, args.warmup, model_cfg,
                            args.seq_len - 1, args.peak_tflops * 1e12))  # fmt: skip
    timed = steps[args.warmup:] or steps[-1:]
    result["engine_mfu_median"] = median([s["mfu"] for s in timed if s.get("mfu") is not None])
    result["loss_first_last"] = [steps[0]["loss"], steps[-1]["loss"]]
    say(f"    {result['status']}: {len(steps)} steps in {result['wall_s']} s (process start to exit), "
        f"median step {result['step_ms']} ms, loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")  # fmt: skip
    return result


def plain_path(args, data_dir: Path, vocab: int, compile: bool, time_left: float | None) -> dict:
    """(b) / (c): the plain-torch loop in this process."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from training.data import PackedDataset
    from training.config import TrainConfig

    name = "plain torch, compiled" if compile else "plain torch, eager"
    result: dict = {"path": name, "status": "ran", "compile": compile}
    say(f"\n({'b' if compile else 'c'}) {name}: {args.model}, {args.precision}, micro batch {args.micro_batch}")
    cfg = TrainConfig(model=args.model, steps=args.steps, micro_batch_size=args.micro_batch)
    cuda = args.device == "cuda"
    loop = PlainLoop(cfg, vocab, args.device, args.precision, compile=compile, fused=cuda)
    ds = PackedDataset(data_dir, seed=cfg.data_seed)
    tokens_per_step = args.micro_batch * (args.seq_len - 1)
    flash = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if cuda else contextlib.nullcontext()
    step_times, losses = [], []
    t_start = time.monotonic()
    with flash:
        for step in range(args.steps):
            x, y = ds.get_batch(step, 0, 1, args.micro_batch)
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = loop.step(x, y)
            losses.append(float(loss))  # synchronizes
            step_times.append(time.perf_counter() - t0)
            if step == 0:
                result["first_step_s"] = round(step_times[0], 2)
                say(f"    first step {step_times[0]:.1f} s" + (" (includes compilation)" if compile else ""))
            if time_left is not None and time.monotonic() - t_start > time_left and step + 1 < args.steps:
                result["stopped_early"] = f"after {step + 1} steps: the --deadline-s budget ran out"
                break
    if cuda:
        result["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
    result.update(summarize(step_times, tokens_per_step, args.warmup, loop.model_cfg, args.seq_len - 1,
                            args.peak_tflops * 1e12))  # fmt: skip
    result["loss_first_last"] = [losses[0], losses[-1]]
    say(f"    {result['steps']} steps, median step {result['step_ms']} ms, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    del loop
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return result


def guarded(fn, *a, **k) -> dict:
    """Run one plain path; a failure is reported, not raised, so the other paths still run."""
    try:
        return fn(*a, **k)
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        return {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:500]}"}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def print_table(paths: list[dict], ceiling: dict | None) -> None:
    header = f"{'path':<44} {'status':<10} {'steps':>5} {'step ms':>9} {'tokens/s':>11} {'MFU':>7} {'of ceiling':>10}"
    say(header)
    say("-" * len(header))
    for p in paths:
        ok = p.get("tokens_per_s") is not None
        share = ""
        if ok and ceiling and ceiling.get("tokens_per_s"):
            share = f"{p['tokens_per_s'] / ceiling['tokens_per_s']:.2f}"
        say(
            f"{p['label']:<44} {p['status']:<10} {p.get('steps', 0):>5} "
            f"{(p['step_ms'] if ok else 0):>9.1f} {(p['tokens_per_s'] if ok else 0):>11,.0f} "
            f"{(p['mfu'] * 100 if ok else 0):>6.1f}% {share:>10}"
        )
    say("MFU: training.model.flops_per_token * tokens/s over the peak; of ceiling: tokens/s over (b)'s")
    for p in paths:
        if p["status"] != "ran" and p.get("reason"):
            say(f"{p['label']}: {p['status']}: {p['reason'].splitlines()[0]}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--model", default="350m", help="a preset of training.config.PRESETS (350m)")
    p.add_argument("--steps", type=int, default=50, help="steps per path (50)")
    p.add_argument("--warmup", type=int, default=10, help="first steps left out of the medians (10)")
    p.add_argument("--micro-batch", type=int, default=16, help="sequences per step (16)")
    p.add_argument("--seq-len", type=int, default=2049, help="packed row length; rows give seq_len-1 tokens (2049)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size of the synthetic data (32000)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_TFLOPS, help="peak of one device for MFU (989)")
    p.add_argument("--paths", default="deepspeed,compiled,eager", help="which paths to run, in this order")
    p.add_argument("--deadline-s", type=float, default=0, help="whole-run budget in seconds (0: none)")
    p.add_argument("--json-out", type=Path, help="also write the JSON report here")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny preset, 2 steps of each path; exit 1 if one fails")
    args = p.parse_args(argv)
    if args.dry_run:
        args.model, args.steps, args.warmup, args.micro_batch, args.seq_len = "tiny", 2, 1, 2, 129
        args.vocab = min(args.vocab, 512)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    packages = prepare_packages()
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    args.device = "cuda" if cuda else "cpu"
    if not cuda and not args.dry_run:
        say("bench/train_gpu.py: no CUDA device visible; use --dry-run for the CPU check")
        return 2
    if args.dry_run:
        os.environ["DS_ACCELERATOR"] = "cpu"
    deepspeed_version = _installed_version("deepspeed")
    say(f"python {sys.executable} {sys.version.split()[0]}; torch {torch.__version__}; deepspeed {deepspeed_version}")
    say(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu (dry run)'}")
    if packages["installed"]:
        say(f"installed from {packages['wheel_dir']}: {', '.join(packages['installed'])}")
    for err in packages["errors"]:
        say(f"package note: {err}")

    from training.config import TrainConfig

    with tempfile.TemporaryDirectory(prefix="train_gpu_") as tmp:
        n_seq = max(256, args.steps * args.micro_batch)
        data_dir = write_synthetic_packed(Path(tmp) / "packed", n_seq, args.seq_len, args.vocab)
        model_cfg = TrainConfig(model=args.model).model_config(args.vocab)
        probe = flash_probe(model_cfg, args.micro_batch, args.seq_len - 1, args.device) if cuda else {}
        if probe:
            error = f" ({probe['flash_error']})" if "flash_error" in probe else ""
            say(f"flash_sdp_enabled={probe['flash_sdp_enabled']}, "
                f"FlashAttention runs this shape: {probe['flash_attention_runs']}{error}")  # fmt: skip
        say(f"data: {n_seq} synthetic rows of {args.seq_len} tokens, vocab {args.vocab}; model {args.model}, "
            f"micro batch {args.micro_batch}, {args.steps} steps, medians over steps {args.warmup + 1}..")  # fmt: skip

        wanted = [w.strip() for w in args.paths.split(",") if w.strip()]
        # Seconds the compiled plain path needs (first-step compilation included); the eager one.
        need = {"compiled": 100.0, "eager": 35.0} if cuda else {"compiled": 0.0, "eager": 0.0}
        results: dict[str, dict] = {}
        for which in wanted:
            left = args.deadline_s - elapsed() if args.deadline_s else None
            later = sum(need.get(w, 0) for w in wanted[wanted.index(which) + 1:])
            if which == "deepspeed":
                timeout = max(60.0, left - later) if left is not None else 3600.0
                results[which] = deepspeed_path(args, data_dir, args.vocab, timeout)
            elif which in ("compiled", "eager"):
                if left is not None and left < need[which]:
                    reason = f"{left:.0f} s left of --deadline-s, it needs ~{need[which]:.0f} s"
                    results[which] = {"status": "skipped", "reason": reason}
                    say(f"\n{which}: skipped ({results[which]['reason']})")
                    continue
                budget = (left - later - 15) if left is not None else None
                results[which] = guarded(plain_path, args, data_dir, args.vocab, which == "compiled", budget)
            else:
                say(f"unknown path {which!r}; choose from deepspeed, compiled, eager")
                return 2

    labels = {"deepspeed": "(a) deepspeed engine, ZeRO-1", "compiled": "(b) plain torch, compiled",
              "eager": "(c) plain torch, eager"}  # fmt: skip
    rows = [{"label": labels[k], **v} for k, v in results.items()]
    ceiling = results.get("compiled") if results.get("compiled", {}).get("tokens_per_s") else None
    say()
    print_table(rows, ceiling)
    report = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "dry_run": args.dry_run,
        "torch": torch.__version__,
        "deepspeed": deepspeed_version,
        "packages": packages,
        "model": args.model,
        "precision": args.precision,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len - 1,
        "vocab": args.vocab,
        "peak_tflops": args.peak_tflops,
        "flash": probe,
        "paths": results,
        "wall_s": round(elapsed(), 1),
    }
    if ceiling and results.get("deepspeed", {}).get("tokens_per_s"):
        report["deepspeed_over_ceiling"] = round(results["deepspeed"]["tokens_per_s"] / ceiling["tokens_per_s"], 3)
    line = json.dumps(report)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(line + "\n")
    say(line)
    if args.dry_run and any(r.get("status") != "ran" for r in results.values()):
        return 1  # the dry run checks the script: every path must run
    return 0


if __name__ == "__main__":
    sys.exit(main())
