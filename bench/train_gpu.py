"""Training throughput on one GPU: our DeepSpeed engine, compiled and eager, with and without
document masks, against a plain-torch loop on the same model, at 350m and 1b.

Usage::

    bash bench/train_gpu.sh [--cases engine/350m/compiled/docmask,...] [--steps 25] [--deadline-s 450]
    bash bench/train_gpu.sh --dry-run        # CPU, tiny preset, 3 steps of each case: checks the script

`train_gpu.sh` picks the Python (`$PYTHON`, else `python3`) and runs this file. Everything it
needs is on the GPU machine except DeepSpeed and its small dependencies, `dagster-pipes`
(`lm_assets.training.train` imports it) and liger-kernel; wheels of those in `bench/out/gpu_wheels/` (see
bench/README.md) are installed into a temporary folder, each only when that package is missing or
older there. Nothing is fetched from the network.

A synthetic packed dataset (uniform random token ids cut into documents of `--mean-doc-tokens` by
EOS, no padding; `seq_len` 2049 gives rows of 2048 tokens) is written to a temporary folder in the
layout `lm_assets.training.data.PackedDataset` reads. Then each case, in order (a case is
`kind/preset/compiled|eager[/docmask|causal]`):

- `engine/...`: `python -m lm_assets.training.train data=... model=<preset> precision=bf16 zero_stage=1
  micro_batch_size=16 compile=<..> document_mask=<..> debug.profile_step=<warmup>` in a
  subprocess: bf16 weights with fp32 master weights and torch's fused AdamW (ZeRO-1), the kernels
  `lm_assets/training/kernels.py` resolves ("auto": liger-kernel when installed, FlexAttention block masks
  for documents, FlashAttention through SDPA for the causal mask). Its step lines and final
  summary (kernels, compile, peak memory, the profiled step's kernel names) are parsed.
- `.../offload`: ZeRO-2 with the optimizer on the host (DeepSpeed's CPU Adam); `.../curriculum`:
  the same rows with a seeded random difficulty each and an easy-to-hard curriculum over the first
  quarter of the epoch (`benchlib.training.with_curriculum`), so the step reads its rows out of
  order: its step time and `data_wait_s_mean` against the case without it show what ordering costs.
- `.../distill-fly` and `.../distill-topk`: `objective=distill` (lm_assets/training/distill.py), the case's preset the
  student of a randomly initialized `--teacher` preset (1b) exported once in bf16: the teacher's forward on
  every micro-batch, or its `--top-k` logits scored once before the first step (`teacher_scoring_s`, and
  the table's bytes on disk, in the case's `distill` figures); against the case without it, what each
  way of distilling costs a step. MFU counts the student's FLOPs only.
- `plain/...`: the same `lm_assets.training.model.Transformer` in a plain-torch bf16 loop (`PlainLoop`):
  fp32 master weights in a fused AdamW, the same lr schedule and clipping, each block compiled on
  its own (when compiled) and the head fused with the loss, under
  `sdpa_kernel(SDPBackend.FLASH_ATTENTION)`: the ceiling the engine is measured against.

Before training, a probe runs each model's attention shape under `sdpa_kernel(FLASH_ATTENTION)`
alone, which raises if FlashAttention cannot take it.

Figures: the median over the steps after `--warmup` of the step time (the engine's own
`step_time_s`, forward to `engine.step()`, data loading excluded; the plain loop's same span,
closed by a device synchronization), the profiled step left out; tokens/s = micro_batch *
(seq_len - 1) / step time; MFU = `lm_assets.training.model.flops_per_token` * tokens/s / `--peak-tflops`
(989, the H200's dense bf16 peak); the device's peak allocated memory. `--deadline-s` (450 by
default, so that the whole script stays under 8 minutes) skips the cases that no longer fit,
last ones first.

The report (every figure, kernels and profiles included) is one JSON object written to
`--json-out`.
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
from dataclasses import dataclass
from pathlib import Path

from benchlib.training import PlainLoop, with_curriculum, write_synthetic_packed

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
    "liger_kernel": "liger_kernel",
}

# Used only when dagster-pipes is missing: `lm_assets.training.pipes.reporting` then prints JSON lines as it
# does outside Dagster. The command line (a) runs says so.
PIPES_STUB = (
    "import sys, types; m = types.ModuleType('dagster_pipes');"
    "m.PipesEnvVarParamsLoader = type('PipesEnvVarParamsLoader', (), "
    "{'is_dagster_pipes_process': lambda self: False}); sys.modules['dagster_pipes'] = m;"
    "from lm_assets.training.train import main; main()"
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
# The paths
# ---------------------------------------------------------------------------------------------


def median(xs):
    return statistics.median(xs) if xs else None


def summarize(step_times: list[float], tokens_per_step: int, warmup: int, model_cfg, seq_len: int,
              peak: float) -> dict:  # fmt: skip
    from lm_assets.training.model import flops_per_token

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


@dataclass(frozen=True)
class Case:
    """One measured configuration: `engine` (python -m lm_assets.training.train) or `plain` (PlainLoop)."""

    kind: str  # engine | plain
    model: str
    compiled: bool
    document_mask: bool = False
    compile_mode: str = "default"  # reduce-overhead: CUDA graphs (the `cudagraphs` case)
    offload: bool = False  # ZeRO-2 with the optimizer on the host, stepped by DeepSpeed's CPU Adam
    curriculum: bool = False  # the first epoch read in an easy-to-hard order (random rows: what it costs)
    distill: str = ""  # fly | topk: objective=distill from a --teacher model, its logits on the fly or top-k

    @property
    def name(self) -> str:
        mask = ("docmask" if self.document_mask else "causal") if self.kind == "engine" else ""
        how = "cudagraphs" if self.compile_mode == "reduce-overhead" else "compiled" if self.compiled else "eager"
        flags = ("offload" if self.offload else "", "curriculum" if self.curriculum else "",
                 f"distill-{self.distill}" if self.distill else "")
        return "/".join(filter(None, (self.kind, self.model, how, mask, *flags)))

    @classmethod
    def parse(cls, text: str) -> "Case":
        parts = text.strip().split("/")
        flags = set()
        while parts and parts[-1] in ("offload", "curriculum", "distill-fly", "distill-topk"):
            flags.add(parts.pop())
        if len(parts) not in (3, 4) or parts[0] not in ("engine", "plain") or parts[2] not in ("compiled", "eager", "cudagraphs"):
            raise ValueError(f"case {text!r} is not engine|plain/<preset>/compiled|eager|cudagraphs[/docmask|causal]"
                             "[/offload][/curriculum][/distill-fly|distill-topk]")  # fmt: skip
        mask = len(parts) == 4 and parts[3] == "docmask"
        if parts[0] == "plain" and (mask or parts[2] == "cudagraphs" or flags):
            raise ValueError(f"case {text!r}: the plain loop runs the causal mask, compiled or eager, only")
        mode = "reduce-overhead" if parts[2] == "cudagraphs" else "default"
        distill = "fly" if "distill-fly" in flags else "topk" if "distill-topk" in flags else ""
        return cls(parts[0], parts[1], parts[2] != "eager", mask, mode, "offload" in flags, "curriculum" in flags,
                   distill)


# In order of importance: a deadline drops the last ones first.
DEFAULT_CASES = ",".join([
    "engine/350m/compiled/docmask", "plain/350m/compiled", "engine/1b/compiled/docmask",
    "engine/350m/compiled/causal", "engine/350m/eager/docmask", "plain/1b/compiled", "engine/1b/compiled/causal",
    "engine/350m/cudagraphs/causal", "engine/1b/compiled/causal/offload", "engine/350m/compiled/docmask/curriculum",
    "engine/350m/compiled/docmask/distill-fly", "engine/350m/compiled/docmask/distill-topk",
])  # fmt: skip
DISTILL_NEEDS_S = 60.0  # the teacher's load (and for top-k its pass over the rows) on top of the case's
# Seconds a case needs on one H200 (process start, compilation, the steps), to skip what cannot fit.
NEEDS_S = {("engine", True): 110.0, ("engine", False): 60.0, ("plain", True): 90.0, ("plain", False): 35.0}


def engine_path(args, case: Case, data_dir: Path, vocab: int, timeout_s: float) -> dict:
    """`python -m lm_assets.training.train` in a subprocess; its step lines and summary parsed."""
    from lm_assets.training.config import TrainConfig

    zero = ["zero_stage=2", "offload.optimizer=cpu"] if case.offload else ["zero_stage=1"]
    if case.curriculum:
        ordered = data_dir.parent / "curriculum"
        data_dir = ordered if ordered.exists() else with_curriculum(data_dir, ordered)
    if case.distill:
        zero += distill_overrides(args, case, data_dir.parent)
    overrides = [f"data={data_dir}", f"model={case.model}", f"precision={args.precision}", *zero,
                 f"micro_batch_size={args.micro_batch}", f"steps={args.steps}", f"compile={case.compiled}",
                 f"compile_mode={case.compile_mode}",
                 f"document_mask={case.document_mask}", f"debug.profile_step={args.warmup}",
                 f"peak_flops={args.peak_tflops * 1e12:g}", "spike.k_sigma=0"]  # fmt: skip
    result: dict = {"case": case.name, "status": "skipped"}
    if case.compile_mode == "reduce-overhead" and args.device == "cpu":
        result["reason"] = "CUDA graphs need CUDA (the engine refuses compile_mode=reduce-overhead on CPU)"
        return result
    if not module_available("deepspeed"):
        result["reason"] = f"deepspeed is not installed for {sys.executable} and no wheel of it in {WHEELS}"
        return result
    if module_available("dagster_pipes"):
        cmd = [sys.executable, "-m", "lm_assets.training.train", *overrides]
    else:
        cmd = [sys.executable, "-c", PIPES_STUB, *overrides]
        result["note"] = "dagster-pipes missing: lm_assets.training.train.main() run with a stub dagster_pipes module"
    result["command"] = "python -m lm_assets.training.train " + " ".join(overrides)
    env = dict(os.environ)
    env["DS_ACCELERATOR"] = "cpu" if args.device == "cpu" else "cuda"
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    say(f"\n{case.name}: {result['command']}  (timeout {timeout_s:.0f} s)")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = "timeout"
    result["wall_s"] = round(time.monotonic() - t0, 1)
    steps, summary = [], {}
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "step_time_s" in record:
            steps.append(record)
        elif "summary" in record:
            summary = record["summary"]
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
    model_cfg = TrainConfig(model=case.model).model_config(vocab)
    tokens_per_step = args.micro_batch * (args.seq_len - 1)
    times = [s["step_time_s"] for i, s in enumerate(steps) if i != args.warmup]  # that one was profiled
    result.update(summarize(times, tokens_per_step, args.warmup, model_cfg, args.seq_len - 1,
                            args.peak_tflops * 1e12))  # fmt: skip
    result["loss_first_last"] = [steps[0]["loss"], steps[-1]["loss"]]
    for key in ("compiled", "document_mask", "kernels", "peak_memory_gib", "data_wait_s_mean", "profile", "distill",
                "teacher_s_mean", "distill_kl"):
        if key in summary:
            result[key] = summary[key]
    say(f"    {result['status']}: {len(steps)} steps in {result['wall_s']} s (process start to exit), "
        f"median step {result['step_ms']} ms, loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")  # fmt: skip
    if "distill" in summary:
        d = summary["distill"]
        teacher = f"teacher {d['teacher_parameters'] / 1e6:.0f}M parameters, {summary.get('teacher_s_mean', 0) * 1e3:.1f} ms a step in its forward"
        if d.get("topk_bytes"):
            teacher += f"; top-{d['top_k']} table {d['topk_bytes'] / 2**20:.0f} MiB scored in {d['teacher_scoring_s']:.1f} s"
        say(f"    {teacher}")
    return result


def distill_overrides(args, case: Case, tmp: Path) -> list[str]:
    """objective=distill from a randomly initialized `--teacher` preset, exported once in bf16 (the step times
    do not depend on what the teacher knows); top-k keeps its logits under a checkpoint folder of the case."""
    import torch

    from lm_assets.training.config import from_preset
    from lm_assets.training.export import export_hf
    from lm_assets.training.model import Transformer

    folder = tmp / f"teacher-{args.teacher}"
    if not (folder / "config.json").exists():
        cfg = from_preset(args.teacher, args.vocab, max_seq_len=max(args.seq_len, 128))
        model = Transformer(cfg, seed=0)  # seeded on the host, as the engine's own initialization is
        export_hf(model, cfg, folder, dtype=torch.bfloat16 if args.device == "cuda" else None)
        del model
    out = ["objective=distill", f"distill.teacher={folder}", "distill.temperature=2.0", "distill.alpha=0.5"]
    if case.distill == "topk":
        out += ["distill.teacher_logits=top-k", f"distill.top_k={args.top_k}", f"checkpoint.dir={tmp / case.name.replace('/', '-')}"]
    return out


def plain_path(args, case: Case, data_dir: Path, vocab: int, time_left: float | None) -> dict:
    """The plain-torch loop in this process (causal attention, FlashAttention on CUDA)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from lm_assets.training.config import TrainConfig
    from lm_assets.training.data import PackedDataset
    from lm_assets.training.kernels import kernel_profile, step_profiler

    result: dict = {"case": case.name, "status": "ran", "compiled": case.compiled}
    say(f"\n{case.name}: {args.precision}, micro batch {args.micro_batch}")
    cfg = TrainConfig(model=case.model, steps=args.steps, micro_batch_size=args.micro_batch)
    cuda = args.device == "cuda"
    loop = PlainLoop(cfg, vocab, args.device, args.precision, compile=case.compiled, fused=cuda)
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
            profiler = step_profiler(torch.device(args.device)) if step == args.warmup else contextlib.nullcontext()
            t0 = time.perf_counter()
            with profiler:
                loss = loop.step(x, y)
                losses.append(float(loss))  # synchronizes
            step_times.append(time.perf_counter() - t0)
            if step == args.warmup:
                result["profile"] = kernel_profile(profiler, step)
                step_times[-1] = None  # profiled: not timed
            if step == 0:
                result["first_step_s"] = round(step_times[0], 2)
                say(f"    first step {step_times[0]:.1f} s" + (" (includes compilation)" if case.compiled else ""))
            if time_left is not None and time.monotonic() - t_start > time_left and step + 1 < args.steps:
                result["stopped_early"] = f"after {step + 1} steps: the --deadline-s budget ran out"
                break
    if cuda:
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    timed = [t for t in step_times if t is not None]
    result.update(summarize(timed, tokens_per_step, args.warmup, loop.model_cfg, args.seq_len - 1,
                            args.peak_tflops * 1e12))  # fmt: skip
    result["loss_first_last"] = [losses[0], losses[-1]]
    say(f"    {result['steps']} steps, median step {result['step_ms']} ms, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    del loop
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return result


def guarded(fn, *a, **k) -> dict:
    """Run one plain case; a failure is reported, not raised, so the other cases still run."""
    try:
        return fn(*a, **k)
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        return {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:500]}"}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def print_table(results: dict[str, dict]) -> None:
    header = (f"{'case':<40} {'status':<9} {'steps':>5} {'step ms':>9} {'tokens/s':>10} {'MFU':>7} "
              f"{'peak GiB':>8} {'of plain':>8}")  # fmt: skip
    say(header)
    say("-" * len(header))
    for name, r in results.items():
        ok = r.get("tokens_per_s") is not None
        ceiling = results.get(f"plain/{name.split('/')[1]}/compiled", {}).get("tokens_per_s")
        share = f"{r['tokens_per_s'] / ceiling:.2f}" if ok and ceiling else ""
        memory = r.get("peak_memory_gib")
        say(
            f"{name:<40} {r['status']:<9} {r.get('steps', 0):>5} {(r['step_ms'] if ok else 0):>9.1f} "
            f"{(r['tokens_per_s'] if ok else 0):>10,.0f} {(r['mfu'] * 100 if ok else 0):>6.1f}% "
            f"{(f'{memory:.1f}' if memory is not None else '-'):>8} {share:>8}"
        )
    say("MFU: lm_assets.training.model.flops_per_token * tokens/s over the peak; of plain: tokens/s over plain/<model>/compiled")
    for name, r in results.items():
        if r.get("kernels"):
            say(f"{name}: kernels {json.dumps(r['kernels'])}")
        notable = (r.get("profile") or {}).get("notable")
        if notable:
            say(f"{name}: profiled step ran {', '.join(n[:60] for n in notable[:8])}")
        if r["status"] != "ran" and r.get("reason"):
            say(f"{name}: {r['status']}: {r['reason'].splitlines()[0]}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--cases", default=DEFAULT_CASES,
                   help="comma-separated engine|plain/<preset>/compiled|eager[/docmask|causal], in order of "
                        f"importance (default: {DEFAULT_CASES})")  # fmt: skip
    p.add_argument("--steps", type=int, default=25, help="steps per case (25)")
    p.add_argument("--warmup", type=int, default=8, help="first steps left out of the medians; the next is profiled (8)")
    p.add_argument("--micro-batch", type=int, default=16, help="sequences per step (16)")
    p.add_argument("--seq-len", type=int, default=2049, help="packed row length; rows give seq_len-1 tokens (2049)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size of the synthetic data (32000)")
    p.add_argument("--mean-doc-tokens", type=int, default=600, help="mean document length in the packed rows (600)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_TFLOPS, help="peak of one device for MFU (989)")
    p.add_argument("--deadline-s", type=float, default=450, help="whole-run budget in seconds; 0: none (450)")
    p.add_argument("--teacher", default="1b", help="the distill cases' teacher preset (1b)")
    p.add_argument("--top-k", type=int, default=64, help="logits kept per position by the distill-topk case (64)")
    p.add_argument("--json-out", type=Path, help="also write the JSON report here")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny preset, 2 steps of each case; exit 1 if one fails")
    args = p.parse_args(argv)
    args.case_list = [Case.parse(c) for c in args.cases.split(",") if c.strip()]
    if args.dry_run:
        args.steps, args.warmup, args.micro_batch, args.seq_len, args.deadline_s = 3, 1, 2, 129, 0
        args.vocab, args.mean_doc_tokens = min(args.vocab, 512), 20
        args.teacher = "tiny"
        tiny = {Case(c.kind, "tiny", c.compiled, c.document_mask, curriculum=c.curriculum, distill=c.distill)
                for c in args.case_list}  # fmt: skip
        args.case_list = sorted(tiny, key=lambda c: c.name)
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
    liger_version = _installed_version("liger_kernel") or _installed_version("liger-kernel")
    say(f"python {sys.executable} {sys.version.split()[0]}; torch {torch.__version__}; deepspeed {deepspeed_version}; "
        f"liger-kernel {liger_version}")  # fmt: skip
    say(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu (dry run)'}")
    if packages["installed"]:
        say(f"installed from {packages['wheel_dir']}: {', '.join(packages['installed'])}")
    for err in packages["errors"]:
        say(f"package note: {err}")

    from lm_assets.training.config import TrainConfig

    results: dict[str, dict] = {}
    probes: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="train_gpu_") as tmp:
        n_seq = max(256, args.steps * args.micro_batch)
        data_dir = write_synthetic_packed(Path(tmp) / "packed", n_seq, args.seq_len, args.vocab,
                                          mean_doc_tokens=args.mean_doc_tokens)  # fmt: skip
        say(f"data: {n_seq} synthetic rows of {args.seq_len} tokens, vocab {args.vocab}, documents of "
            f"{args.mean_doc_tokens} tokens on average; micro batch {args.micro_batch}, {args.steps} steps, "
            f"medians over steps {args.warmup + 2}.., step {args.warmup + 1} profiled")  # fmt: skip
        for model in dict.fromkeys(c.model for c in args.case_list):
            if cuda:
                model_cfg = TrainConfig(model=model).model_config(args.vocab)
                probes[model] = flash_probe(model_cfg, args.micro_batch, args.seq_len - 1, args.device)
                error = f" ({probes[model]['flash_error']})" if "flash_error" in probes[model] else ""
                say(f"{model}: FlashAttention runs its attention shape: {probes[model]['flash_attention_runs']}{error}")
        cases = args.case_list
        for i, case in enumerate(cases):
            left = args.deadline_s - elapsed() if args.deadline_s else None
            need = NEEDS_S[(case.kind, case.compiled)] + (DISTILL_NEEDS_S if case.distill else 0.0) if cuda else 0.0
            if left is not None and left < need:
                results[case.name] = {"case": case.name, "status": "skipped",
                                      "reason": f"{left:.0f} s left of --deadline-s, it needs ~{need:.0f} s"}  # fmt: skip
                say(f"\n{case.name}: skipped ({results[case.name]['reason']})")
                continue
            if case.kind == "engine":
                results[case.name] = engine_path(args, case, data_dir, args.vocab, left - 5 if left else 3600.0)
            else:
                budget = left - 15 if left is not None else None
                results[case.name] = guarded(plain_path, args, case, data_dir, args.vocab, budget)
                results[case.name].setdefault("case", case.name)

    say()
    print_table(results)
    report = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "dry_run": args.dry_run,
        "torch": torch.__version__,
        "deepspeed": deepspeed_version,
        "liger_kernel": liger_version,
        "packages": packages,
        "precision": args.precision,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len - 1,
        "vocab": args.vocab,
        "mean_doc_tokens": args.mean_doc_tokens,
        "peak_tflops": args.peak_tflops,
        "flash": probes,
        "cases": results,
        "wall_s": round(elapsed(), 1),
    }
    line = json.dumps(report)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(line + "\n")
    say(f"report: {args.json_out}" if args.json_out else "")
    if args.dry_run and any(r.get("status") != "ran" for r in results.values()):
        return 1  # the dry run checks the script: every case must run
    return 0


if __name__ == "__main__":
    sys.exit(main())
