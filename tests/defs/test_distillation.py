"""distill_run through Dagster: the teacher a `checkpoints` partition, the student a new one (`distill-step_N`)
with the teacher's width, vocabulary and tokenizer and fewer layers, what the run cost reported as metadata."""

import json

import dagster as dg
import pytest

from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
from lm_assets.defs.compression.distillation import distill_run_and_checkpoint
from lm_assets.defs.training.assets import TrainingLauncher, with_setting
from lm_assets.storage.layout import PACKED_FOLDER, TOKENIZER_KEYS, checkpoint_key, checkpoint_run_folder
from tests.support.tiny_llama import llama_style_tokenizer
from tests.training.test_training_parallel import write_packed
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer


def test_with_setting_reaches_nested_fields_and_keeps_the_rest():
    cfg = {"distill": {"alpha": 0.5}, "steps": 3}
    assert with_setting(cfg, "distill.teacher", "/t") == {"distill": {"alpha": 0.5, "teacher": "/t"}, "steps": 3}
    assert with_setting(cfg, "init_from", "/b") == cfg | {"init_from": "/b"}
    assert cfg == {"distill": {"alpha": 0.5}, "steps": 3}


def test_distill_run_makes_a_student_checkpoint_partition_from_a_teacher_partition(tmp_path):
    root = tmp_path / "storage"
    tokenizer = root / TOKENIZER_KEYS["model"]
    tokenizer.parent.mkdir(parents=True)
    tokenizer.write_bytes(llama_style_tokenizer())  # 400 pieces
    write_packed(root / PACKED_FOLDER, n_seq=32)  # ids below 300
    run = root / checkpoint_run_folder("main")
    cfg = from_preset("tiny", 400, max_seq_len=64)
    export_hf(Transformer(cfg, seed=3).eval(), cfg, run / "step_00000002" / "hf", tokenizer_model_path=str(tokenizer))
    (run / "train_config.json").write_text(json.dumps({"tokenizer_model": str(tokenizer)}))
    instance = dg.DagsterInstance.ephemeral()
    teacher = checkpoint_key("main", "step_00000002")
    instance.add_dynamic_partitions(checkpoint_partitions.name, [teacher])
    resources = {"storage": StorageResource(root=str(root), s3=s3_resource_from_env()),
                 "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
                 "pipes_subprocess_client": dg.PipesSubprocessClient()}  # fmt: skip
    settings = {"steps": 4, "micro_batch_size": 4, "warmup_steps": 1, "lr": 3e-3, "student_layers": 1,
                "teacher_logits": "top-k", "top_k": 8, "alpha": 0.7, "temperature": 2.0}  # fmt: skip

    result = dg.materialize([distill_run_and_checkpoint], instance=instance, resources=resources,
                            run_config={"ops": {"distill_run": {"config": settings}}})  # fmt: skip
    meta = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("distill_run")}["distill_run"]
    assert meta["objective"].value == "distill"
    assert meta["distill"].value["teacher"] == str(run / "step_00000002" / "hf")
    assert meta["distill"].value["alpha"] == 0.7 and meta["distill"].value["teacher_parameters"] > 0
    assert meta["teacher_topk_mib"].value == pytest.approx(32 * 32 * 8 * 6 / 2**20, abs=0.01)
    assert meta["distill_kl"].value > 0 and meta["distill_ce"].value > 0
    student = checkpoint_key("distill", "step_00000004")
    assert student in instance.get_dynamic_partitions(checkpoint_partitions.name)
    hf = root / checkpoint_run_folder("distill") / "step_00000004" / "hf"
    exported = json.loads((hf / "config.json").read_text())
    assert (exported["num_hidden_layers"], exported["hidden_size"], exported["vocab_size"]) == (1, cfg.dim, 400)
    assert (hf / "tokenizer.model").read_bytes() == tokenizer.read_bytes()

    with pytest.raises(dg.Failure, match="one of this distillation run's own"):
        dg.materialize([distill_run_and_checkpoint], instance=instance, resources=resources,
                       run_config={"ops": {"distill_run": {"config": settings | {"teacher_checkpoint": student}}}})  # fmt: skip


def test_the_sample_profile_leaves_distillation_without_pipeline_stages():
    import os
    import subprocess
    import sys

    code = ("from lm_assets.defs.compression.distillation import DistillRunConfig as D; "
            "from lm_assets.defs.training.assets import TrainingRunConfig as T; print(D().pp, T().pp)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LM_ASSETS_LAUNCHPAD_DEFAULTS": "sample"},
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert out == ["1", "2"]  # pretraining's sample layout is pipeline parallel; distillation refuses it
