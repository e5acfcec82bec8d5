"""Distillation: a smaller student trained on a teacher checkpoint's logits, by the same training program
(`objective=distill`, lm_assets/training/distill.py), engine, layouts and Pipes as every run."""

import json
from pathlib import Path

import dagster as dg
from pydantic import Field

from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.sample_defaults import defaults_note, launchpad_default
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.evaluation.common import checkpoint_dir, hf_export
from lm_assets.defs.training.assets import TRAIN_DEFAULTS, TrainingLauncher, TrainingRunConfig, launch_training
from lm_assets.storage.layout import PACKED_FOLDER, SFT_KEYS

DISTILL_DATA = {"pretraining": PACKED_FOLDER, "sft": SFT_KEYS["packed"]}


def distill_default(field: str, fallback):
    """distill_run's default for `field`: the selected profile's, else its own."""
    return launchpad_default("distill_run", field, fallback)


class DistillRunConfig(TrainingRunConfig):
    """training_run's knobs for the student, the teacher and distillation's own."""

    run_name: str = Field(default="distill", description="the student's run: its checkpoints are `checkpoints` "
                          "partitions `<run_name>-step_<n>`, evaluated as every checkpoint is")  # fmt: skip
    steps: int = Field(default=distill_default("steps", 100),
                       description="optimizer steps the run ends at" + defaults_note("distill_run"))
    lr: float = Field(default=distill_default("lr", TRAIN_DEFAULTS.optim.lr),
                      description="peak learning rate, after warmup, decayed by a cosine to a tenth of it")
    warmup_steps: int = Field(default=distill_default("warmup_steps", TRAIN_DEFAULTS.optim.warmup_steps),
                              description="steps of linear warmup to lr")
    micro_batch_size: int = Field(default=distill_default("micro_batch_size", TRAIN_DEFAULTS.micro_batch_size),
                                  description="sequences per rank per micro-step")
    save_every: int = Field(default=distill_default("save_every", 0), description="a checkpoint every this many "
                            "steps, and one at the end; 0: only at the end")  # fmt: skip
    # Pretraining's layout defaults are not distillation's: the teacher's logits never reach a pipeline's
    # last stage, so distillation runs data and tensor parallel only.
    pp: int = Field(default=1, description="pipeline-parallel degree: 1 (distillation refuses pipeline parallelism)")
    tp: int = Field(default=1, description="tensor-parallel degree")
    dp: int = Field(default=1, description="data-parallel degree; the run has tp × dp ranks")
    teacher_checkpoint: str = Field(default="", description="the teacher, a checkpoints partition (e.g. "
                                    "dpo-step_00000030); empty: the latest of teacher_run")  # fmt: skip
    teacher_run: str = Field(default="main", description="with teacher_checkpoint empty: the run whose latest "
                             "checkpoint teaches")  # fmt: skip
    data: str = Field(default="pretraining", description="what the student reads: `pretraining` (packed_dataset) or "
                      "`sft` (sft_dataset: the loss on assistant tokens only)")  # fmt: skip
    student_layers: int = Field(default=0, ge=0, description="the student's layers; its width, heads and context are "
                                "the teacher's; 0: half the teacher's layers")  # fmt: skip
    temperature: float = Field(default=2.0, gt=0, description="the softmax temperature T of both distributions")
    alpha: float = Field(default=0.5, ge=0, le=1, description="the weight of T² · KL(teacher ‖ student); the "
                         "next-token loss has 1 − alpha")  # fmt: skip
    teacher_logits: str = Field(
        default="on-the-fly", description="`on-the-fly`: the teacher runs beside every micro-batch (its weights in "
        "memory, one forward per micro-batch); `top-k`: its top_k logits at every position scored once before the "
        "first step and kept beside the checkpoints (rows × positions × top_k × 6 bytes of disk)",
    )
    top_k: int = Field(default=64, ge=1, description="logits kept per position with teacher_logits=top-k")

    def student_shape(self, teacher_folder: Path) -> list[str]:
        from lm_assets.training.hf_init import model_config

        t = model_config(teacher_folder)
        layers = self.student_layers or max(1, t.n_layers // 2)
        return [f"dim={t.dim}", f"n_layers={layers}", f"n_heads={t.n_heads}", f"n_kv_heads={t.n_kv_heads}",
                f"ffn_hidden={t.ffn_hidden}", f"max_seq_len={t.max_seq_len}", f"rope_theta={t.rope_theta}",
                f"norm_eps={t.norm_eps}", f"tie_embeddings={t.tie_embeddings}"]  # fmt: skip

    def distill_settings(self) -> dict:
        return {"temperature": self.temperature, "alpha": self.alpha, "teacher_logits": self.teacher_logits,
                "top_k": self.top_k}  # fmt: skip


def teacher_checkpoint(context: dg.AssetExecutionContext, config: DistillRunConfig) -> str:
    known = context.instance.get_dynamic_partitions(checkpoint_partitions.name)
    chosen = config.teacher_checkpoint or next(
        (k for k in reversed(known) if k.startswith(f"{config.teacher_run}-step_")), "")
    if chosen not in known:
        raise dg.Failure(f"no checkpoint {chosen or 'of run ' + config.teacher_run!r} to distill: train first, or set "
                         f"teacher_checkpoint to one of {known[-5:]}")  # fmt: skip
    if chosen.startswith(f"{config.run_name}-"):
        raise dg.Failure(f"teacher_checkpoint {chosen} is one of this distillation run's own")
    return chosen


@dg.multi_asset(
    name="distill_run",  # the op, and the key of its run config: `ops: {distill_run: {config: ...}}`
    specs=[
        dg.AssetSpec("distill_run", deps=["packed_dataset", "checkpoint"], group_name="compression",
                     kinds={"deepspeed", "pytorch"},
                     description="Knowledge distillation: a student with fewer layers learns a teacher checkpoint's "
                     "logits (T² · KL at a temperature, plus the next-token loss, weighted) with the same training "
                     "program, engine, layouts and Pipes; the teacher on the fly, or its top-k logits scored once. "
                     "The natural use is a draft model for speculative decoding."),
        dg.AssetSpec("distill_checkpoint", deps=["packed_dataset", "checkpoint"], group_name="compression",
                     kinds={"deepspeed", "safetensors"},
                     description="The student's checkpoints, each a `checkpoints` partition (`distill-step_N`) "
                     "evaluated like any other, the latest exported for HF with the teacher's tokenizer."),
    ],
)
def distill_run_and_checkpoint(
    context: dg.AssetExecutionContext,
    config: DistillRunConfig,
    storage: StorageResource,
    training_launcher: TrainingLauncher,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    if config.data not in DISTILL_DATA:
        raise dg.Failure(f"data must be one of {sorted(DISTILL_DATA)}, got {config.data!r}")
    if config.teacher_logits not in ("on-the-fly", "top-k"):
        raise dg.Failure(f"teacher_logits must be on-the-fly or top-k, got {config.teacher_logits!r}")
    store = storage.storage()
    chosen = teacher_checkpoint(context, config)
    folder = hf_export(store, chosen)
    root = Path(store.local_path(""))
    # The student speaks the teacher's tokenizer: the one its run trained with (a fine-tuned teacher's has the
    # chat markers, and its chat template beside it).
    teacher_dir, _ = checkpoint_dir(store, chosen)
    trained_with = json.loads((teacher_dir / "train_config.json").read_text()).get("tokenizer_model", "")
    tokenizer = Path(trained_with) if trained_with and Path(trained_with).is_relative_to(root) else folder / "tokenizer.model"
    context.log.info(f"distilling {chosen} ({folder}) into a student on {config.data} data")
    yield from launch_training(
        context, config, storage, training_launcher, pipes_subprocess_client, data_key=DISTILL_DATA[config.data],
        tokenizer_key=str(tokenizer.relative_to(root)), path_settings={"distill.teacher": str(folder.relative_to(root))},
        settings={"run_asset": "distill_run", "checkpoint_asset": "distill_checkpoint", "objective": "distill",
                  "model_overrides": config.student_shape(folder), "distill": config.distill_settings()},
    )
