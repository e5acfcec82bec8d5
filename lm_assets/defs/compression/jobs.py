"""The compression job: the compressed variants of one checkpoint and what each costs."""

from lm_assets.defs.common.jobs import workload_job

compression_job = workload_job(
    "compression_job", "evaluation", ("compressed_checkpoint",),
    "GGUF (F16, Q8_0) and torchao int8 variants of one checkpoint, each with its size, speed and the quality it "
    "loses against the export.",
)

model_card_job = workload_job(
    "model_card_job", "evaluation", ("model_card",),
    "The model card (README.md) of one checkpoint's HF export, written from the metadata its lineage recorded: "
    "data, training, evaluation, safety and bias, compressed variants, declared data licences.",
)

distill_job = workload_job(
    "distill_job", "training", ("distill_run", "distill_checkpoint"),
    "Knowledge distillation of a checkpoint into a student with fewer layers, its checkpoints distill-step_N.",
)
