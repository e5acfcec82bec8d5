"""The parallel-layout planner: its model-state estimates against DeepSpeed's own estimators, the layouts
it considers, and the recommendation it writes as training_run's config."""

import json

import pytest

from lm_assets.training.planner import (
    Layout,
    ModelShape,
    estimate,
    layouts,
    model_state_bytes_per_param,
    plan,
    training_run_config,
)

GIB = 2**30
SEVEN_B = ModelShape(params=7e9, layers=32, hidden=4096, heads=32)


@pytest.mark.parametrize("gpus", [1, 8, 64])
def test_model_states_match_deepspeeds_estimators(gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    params, layer = SEVEN_B.params, SEVEN_B.layer_params
    for offload in (False, True):
        _, theirs = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=gpus, cpu_offload=offload)
        ours = estimate(SEVEN_B, Layout(gpus, 1, 1, 2, offload_optimizer=offload), 2048, 1, 1, 80).model_states_gib
        assert ours * GIB == pytest.approx(theirs, rel=1e-6)
    for offload, offload_param in ((False, False), (True, False), (True, True)):
        _, theirs, _ = estimate_zero3_model_states_mem_needs(params, layer, num_gpus_per_node=gpus, cpu_offload=offload,
                                                             cpu_offload_params=offload_param)
        layout = Layout(gpus, 1, 1, 3, offload_optimizer=offload, offload_param=offload_param)
        assert estimate(SEVEN_B, layout, 2048, 1, 1, 80).model_states_gib * GIB == pytest.approx(theirs, rel=1e-6)


def test_zero_stages_divide_more_of_the_states_and_fp32_keeps_sixteen_bytes():
    per_param = [model_state_bytes_per_param(stage, 8, True, False, False) for stage in range(4)]
    assert per_param == [20.0, 4 + 16 / 8, 2 + 18 / 8, 18 / 8]
    assert model_state_bytes_per_param(0, 8, False, False, False) == 16.0
    assert model_state_bytes_per_param(2, 8, False, False, False) == 4 + (4 + 12) / 8  # and the partition's fp32 copy


MEASURED_SHAPE = ["dim=256", "n_layers=4", "n_heads=4", "n_kv_heads=2", "ffn_hidden=704", "max_seq_len=64"]


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage,precision", [(0, "fp32"), (2, "fp32"), (1, "bf16"), (3, "bf16")])
def test_model_state_estimates_bound_what_two_cpu_ranks_hold(zero_stage, precision, tmp_path):
    """A 3.1M-parameter model on dp=2: the tensors alive on rank 0 before an optimizer step (weights,
    gradients, optimizer states, ZeRO's partitions and buffers) are never more than the estimate, and
    at least 70% of it. The estimate counts the step's peak, DeepSpeed's estimators' way; before the
    step, mixed precision holds about 9 bytes a parameter against 11-12 estimated."""
    from tests.training.test_training_parallel import base, run_ok, write_packed
    from lm_assets.training.config import apply_overrides, from_preset
    from lm_assets.training.model import num_params

    model = apply_overrides(from_preset("tiny", 300), MEASURED_SHAPE)
    summaries = []
    run_ok(2, base(write_packed(tmp_path / "data"), 3, micro_batch_size=2, zero_stage=zero_stage, precision=precision,
                   model_overrides=",".join(MEASURED_SHAPE), **{"checkpoint.dir": tmp_path / "ckpt"}), summaries=summaries)  # fmt: skip
    measured = summaries[0]["model_state_bytes"]
    shape = ModelShape(params=num_params(model), layers=model.n_layers, hidden=model.dim, heads=model.n_heads, vocab=300)
    estimated = estimate(shape, Layout(2, 1, 1, zero_stage), 64, 2, 1, 80, mixed=precision != "fp32").model_states_gib * GIB
    assert 0.7 * estimated <= measured <= 1.01 * estimated, (measured / shape.params, estimated / shape.params)


def test_only_layouts_the_training_program_runs_are_considered():
    considered = layouts(SEVEN_B, gpus=64, gpus_per_node=8)
    assert considered and all(l.dp * l.tp * l.pp == 64 for l in considered)
    assert all(l.tp <= 8 and SEVEN_B.heads % l.tp == 0 and SEVEN_B.layers % l.pp == 0 for l in considered)
    assert all(l.zero_stage <= 1 and not l.offload_optimizer for l in considered if l.pp > 1)
    assert all(l.zero_stage == 3 for l in considered if l.offload_param)


def test_activation_checkpointing_and_model_parallelism_cut_activations():
    plain = estimate(SEVEN_B, Layout(8, 1, 1, 1), 4096, 1, 8, 80)
    checkpointed = estimate(SEVEN_B, Layout(8, 1, 1, 1, activation_checkpointing=True), 4096, 1, 8, 80)
    tensor_parallel = estimate(SEVEN_B, Layout(1, 8, 1, 1), 4096, 1, 8, 80)
    assert checkpointed.activations_gib < plain.activations_gib / 5
    assert tensor_parallel.activations_gib < plain.activations_gib and tensor_parallel.model_states_gib < plain.model_states_gib


def test_the_recommendation_fits_and_becomes_a_training_run_config():
    from lm_assets.defs.training.assets import TrainingRunConfig

    ranked = plan(SEVEN_B, gpus=64, gpu_memory_gib=80, seq=4096)
    best = ranked[0]
    assert best.fits and not best.layout.offload_optimizer and not best.layout.activation_checkpointing
    config = TrainingRunConfig(**training_run_config(best, 1, 8))
    assert config.world_size == 64 and (config.pp, config.tp, config.dp) == (best.layout.pp, best.layout.tp, best.layout.dp)
    squeezed = plan(SEVEN_B, gpus=8, gpu_memory_gib=24, seq=4096)[0]  # 8 small GPUs: recomputation or offload
    assert squeezed.fits and (squeezed.layout.activation_checkpointing or squeezed.layout.offload_optimizer
                              or squeezed.layout.zero_stage == 3 or squeezed.layout.tp > 1)


def test_the_command_prints_the_recommendation_and_writes_it(tmp_path, capsys):
    from lm_assets.app.cli import main

    out = tmp_path / "plan.json"
    assert main(["plan-training", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--seq", "4096",
                 "--gpus", "64", "--gpu-memory", "80", "--write", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "recommended: dp=" in printed and "GiB per GPU" in printed
    written = json.loads(out.read_text())["ops"]["training_run"]["config"]
    best = plan(SEVEN_B, gpus=64, gpu_memory_gib=80, seq=4096)[0].layout
    assert (written["dp"], written["tp"], written["pp"], written["zero_stage"]) == (best.dp, best.tp, best.pp, best.zero_stage)
    assert main(["plan-training", "--params", "7e11", "--layers", "32", "--hidden", "4096", "--seq", "4096",
                 "--gpus", "1", "--gpu-memory", "8"]) == 2


def test_adapters_leave_the_frozen_base_its_weights_only_and_a_held_reference_adds_a_copy():
    from lm_assets.training.planner import Layout, ModelShape, Tuning, estimate, lora_params

    shape = ModelShape(params=7e9, layers=32, hidden=4096, heads=32, ffn_hidden=11008)
    adapter = lora_params(shape, 8)
    assert adapter == 32 * 8 * 4 * 2 * 4096 and adapter / shape.params < 0.005
    layout = Layout(dp=8, tp=1, pp=1, zero_stage=1)
    full = estimate(shape, layout, 2048, 1, 8, 80)
    lora = estimate(shape, layout, 2048, 1, 8, 80, tuning=Tuning(adapter_params=adapter))
    held = estimate(shape, layout, 2048, 1, 8, 80, tuning=Tuning(reference="held"))
    gib = 2**30
    # full: 4 + 16 / 8 bytes per parameter; adapters: 2 bytes per frozen parameter, the full cost on the adapters
    assert abs(full.model_states_gib - 7e9 * 6 / gib) < 0.01
    assert abs(lora.model_states_gib - (7e9 * 2 + adapter * 6) / gib) < 0.01
    assert abs(held.model_states_gib - full.model_states_gib - 7e9 * 2 / gib) < 0.01
    # with adapters the base (adapter off) is the reference: nothing more is held
    both = estimate(shape, layout, 2048, 1, 8, 80, tuning=Tuning(adapter_params=adapter, reference="held"))
    assert both.model_states_gib == lora.model_states_gib
    zero3 = estimate(shape, Layout(dp=8, tp=1, pp=1, zero_stage=3), 2048, 1, 8, 80, tuning=Tuning(adapter_params=adapter))
    assert zero3.model_states_gib < lora.model_states_gib


def test_plan_training_reports_the_adapters(capsys):
    from lm_assets.app.cli import main

    assert main(["plan-training", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--seq", "2048", "--gpus", "8",
                 "--gpu-memory", "24", "--adapter-rank", "8", "--dpo-reference", "held"]) == 0
    out = capsys.readouterr().out
    assert "adapters of rank 8 on q_proj,k_proj,v_proj,o_proj: 8.4 M parameters trained (0.12% of 7 B)" in out
    assert "recommended: dp=8 tp=1 pp=1" in out
