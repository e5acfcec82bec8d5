"""Resuming under another layout (`lm_assets.training.reshard`).

The fast test shards a whole training state for a (pp, tp, dp) layout the way the ZeRO-1/2 and bf16
optimizers hold it (DeepSpeed's own `link_hp_params` maps each parameter onto the flat
partitions, `scatter_to_partition` fills them, as a resharded resume does), writes the
partitions as DeepSpeed saves them, and gathers them back with the reader: every weight and
moment comes back exactly.

The slow tests train a layout for 10 steps, saving at step 5, then resume that step-5 checkpoint
in another layout to step 10 (CPU, gloo, the tiny model). The losses of steps 6-10 match the
uninterrupted run (within 1e-5 in fp32, where zeroed moments or reset step counts move them by
about 3e-2; in bf16, whose uninterrupted runs in two layouts differ by up to 5e-4, within 2e-3),
with the same learning rates, and the step-10 checkpoint holds the same step counts, schedule and
(fp32) weights and moments.
"""

from __future__ import annotations

import math
import shutil
from collections import OrderedDict

import numpy as np
import pytest
import torch

from tests.training.test_training_parallel import VOCAB, base, launch, losses, run_ok, write_packed
from lm_assets.training.checkpoint import TAG_FORMAT
from lm_assets.training.checkpoint_files import merge_tp, tp_dim
from lm_assets.training.config import from_preset
from lm_assets.training.reshard import consolidate, gather_flat_partitions, logical_name, scatter_to_partition, tp_shard

slow = pytest.mark.slow


# ---------------------------------------------------------------------------------------------
# Shard and gather, in process
# ---------------------------------------------------------------------------------------------


def whole_state(seed: int = 0) -> dict[str, dict[str, torch.Tensor]]:
    cfg = from_preset("tiny", VOCAB)
    g = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        from lm_assets.training.model import Transformer

        shapes = {n: p.shape for n, p in Transformer(cfg, seed=None).named_parameters()}
    return {n: {k: torch.randn(shape, generator=g) for k in ("param", "exp_avg", "exp_avg_sq")} for n, shape in shapes.items()}


def stage_names(names: list[str], n_layers: int, pp: int) -> list[dict[str, str]]:
    """Per pipeline stage, its parameters' engine names by `Transformer` name (blocks split evenly,
    the embedding on the first stage, the head on the last)."""
    if pp == 1:
        return [{n: n for n in names}]
    from lm_assets.training.parallel import pipeline_layer_name

    stages = []
    for s, blocks in enumerate(np.array_split(np.arange(1, n_layers + 1), pp)):
        layers = ([0] if s == 0 else []) + [int(b) for b in blocks] + ([n_layers + 1] if s == pp - 1 else [])
        stage = {}
        for i in layers:
            prefix = pipeline_layer_name(i, n_layers)
            stage |= {n: f"{i}.{n[len(prefix):]}" for n in names if n.startswith(prefix)}
        stages.append(stage)
    return stages


def saved_partitions(local: dict[str, dict[str, torch.Tensor]], dp: int) -> list[dict]:
    """One model-parallel rank's optimizer state dicts, per data-parallel rank, as DeepSpeed's
    ZeRO-1 saves them, from its parameters' local tensors (by engine name)."""
    from deepspeed.utils.mixed_precision_linkage import link_hp_params

    params = {name: torch.nn.Parameter(t["param"].clone()) for name, t in local.items()}
    groups = [[n for n in params if params[n].dim() >= 2], [n for n in params if params[n].dim() < 2]]
    saved = []
    for rank in range(dp):
        sd = {"single_partition_of_fp32_groups": [], "base_optimizer_state": {"state": {}}, "param_slice_mappings": []}
        for g, names in enumerate(groups):
            numel = sum(params[n].numel() for n in names)
            size = math.ceil(numel / (2 * dp)) * 2  # DeepSpeed aligns a group to 2 * dp elements
            flat = torch.zeros(size)
            link_hp_params([params[n] for n in names], flat, {}, {}, False, g, rank * size, size, None)
            state = {"step": torch.tensor(7.0)}
            for key, target in [("param", flat)] + [(k, torch.zeros(size)) for k in ("exp_avg", "exp_avg_sq")]:
                scatter_to_partition([params[n] for n in names], {id(params[n]): local[n][key] for n in names}, target)
                if key != "param":
                    state[key] = target
            padding = min(size, max(0, (rank + 1) * size - numel))  # the group's tail, not saved
            sd["single_partition_of_fp32_groups"].append(flat[: size - padding])
            sd["base_optimizer_state"]["state"][g] = state
            sd["param_slice_mappings"].append(
                OrderedDict((n, params[n]._hp_mapping.get_hp_fragment_address()) for n in names if params[n]._hp_mapping)
            )
        saved.append(sd)
    return saved


@pytest.mark.parametrize(("pp", "tp", "dp"), [(1, 1, 1), (1, 1, 3), (1, 2, 2), (2, 1, 3), (2, 2, 2)])
def test_shard_then_gather_restores_every_tensor(pp, tp, dp):
    n_layers = from_preset("tiny", VOCAB).n_layers
    whole = whole_state()
    gathered: dict[str, dict[int, dict]] = {}
    for stage in stage_names(list(whole), n_layers, pp):
        for tp_rank in range(tp):
            local = {
                engine_name: {k: tp_shard(v, tp_dim(name), tp, tp_rank) for k, v in whole[name].items()}
                for name, engine_name in stage.items()
            }
            for engine_name, state in gather_flat_partitions(saved_partitions(local, dp)).items():
                assert state["step"] == 7.0
                gathered.setdefault(logical_name(engine_name, pp > 1, n_layers), {})[tp_rank] = state
    assert gathered.keys() == whole.keys()
    for name, ranks in gathered.items():
        for key, full in whole[name].items():
            local_shape = tp_shard(full, tp_dim(name), tp, 0).shape
            merged = merge_tp(name, [ranks[r][key].view(local_shape) for r in range(tp)])
            assert torch.equal(merged, full), (name, key)


# ---------------------------------------------------------------------------------------------
# Resumed jobs
# ---------------------------------------------------------------------------------------------

CASES = {
    # The required case: pipeline x data parallel into tensor x data parallel, ZeRO-1 on both sides.
    "pp2dp2-zero1-into-tp2dp2-zero1": (
        4, {"micro_batch_size": 2, "zero_stage": 1, "parallel.pp": 2, "parallel.dp": 2},
        4, {"micro_batch_size": 2, "zero_stage": 1, "parallel.tp": 2, "parallel.dp": 2}, 1e-5,
        "pp=2 tp=1 dp=2 (ZeRO-1, fp32) into pp=1 tp=2 dp=2 (ZeRO-1, fp32)"),
    # The torch optimizer's state (fp32 ZeRO-0), 2 processes into 4 (ranks 2 and 3 have no RNG file),
    # the same 2 sequences per step as 2 data-parallel ranks of 1.
    "pp2-zero0-into-tp2dp2-zero0": (
        2, {"micro_batch_size": 2, "zero_stage": 0, "parallel.pp": 2},
        4, {"micro_batch_size": 1, "zero_stage": 0, "parallel.tp": 2, "parallel.dp": 2}, 1e-5,
        "pp=2 tp=1 dp=1 (ZeRO-0, fp32) into pp=1 tp=2 dp=2 (ZeRO-0, fp32)"),
    # bf16: the bf16 optimizer's partitions (ZeRO-0) into ZeRO-1's, fp32 master weights carried over.
    "bf16-pp2-zero0-into-dp2-zero1": (
        2, {"micro_batch_size": 2, "zero_stage": 0, "parallel.pp": 2, "precision": "bf16"},
        2, {"micro_batch_size": 1, "zero_stage": 1, "parallel.dp": 2, "precision": "bf16"}, 2e-3,
        "pp=2 tp=1 dp=1 (ZeRO-0, bf16) into pp=1 tp=1 dp=2 (ZeRO-1, bf16)"),
}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_packed(tmp_path_factory.mktemp("packed"))


@slow
@pytest.mark.parametrize("case", list(CASES))
def test_resume_in_another_layout_continues_the_run(case, data, tmp_path):
    n_saved, saved_layout, n_resumed, resumed_layout, atol, change = CASES[case]
    uninterrupted = tmp_path / "uninterrupted"
    reference = run_ok(n_saved, base(data, 10, **saved_layout, **{"checkpoint.dir": uninterrupted,
                                                                  "checkpoint.save_every": 5}))  # fmt: skip
    step5 = TAG_FORMAT.format(5)
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(uninterrupted / step5, resumed_dir / step5)
    (resumed_dir / "latest").write_text(step5)

    rc, after, stderr = launch(n_resumed, base(data, 10, **resumed_layout, **{"checkpoint.dir": resumed_dir}))
    assert rc == 0, stderr[-4000:]
    assert f"[rank 0] INFO lm_assets.training: resumed step 5 from layout {change}\n" in stderr, stderr[-4000:]
    assert [m["step"] for m in after] == list(range(6, 11))
    assert [m["tokens"] for m in after] == [m["tokens"] for m in reference[5:]]
    assert [m["lr"] for m in after] == [m["lr"] for m in reference[5:]]
    diff = np.abs(np.array(losses(after)) - np.array(losses(reference[5:])))
    print(f"{case}: max |loss difference| over steps 6-10: {diff.max():.3g}")
    assert diff.max() <= atol, (losses(after), losses(reference[5:]))

    ours, theirs = consolidate(resumed_dir / TAG_FORMAT.format(10)), consolidate(uninterrupted / TAG_FORMAT.format(10))
    assert ours.steps == theirs.steps and set(ours.steps.values()) == {10.0}
    assert ours.lr_scheduler == theirs.lr_scheduler and ours.counters == theirs.counters
    assert ours.trainer["step"] == 10 and ours.trainer["tokens"] == theirs.trainer["tokens"]
    if saved_layout.get("precision", "fp32") == "fp32":
        for name in theirs.tensors:
            for key, tol in (("param", 1e-6), ("exp_avg", 1e-7), ("exp_avg_sq", 1e-8)):
                torch.testing.assert_close(ours.tensors[name][key], theirs.tensors[name][key], rtol=0, atol=tol,
                                           msg=f"{name} {key}")  # fmt: skip
