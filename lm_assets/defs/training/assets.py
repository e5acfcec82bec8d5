"""training_run and checkpoint: the standalone DeepSpeed program, launched through Dagster Pipes.

Locally the launcher is torchrun (or the deepspeed launcher) with N CPU processes on gloo, as a
`PipesSubprocessClient` subprocess in a process group of its own, ended whole when the run is
terminated (`process_group.py`). On a cluster, the same config becomes a Kubernetes
PyTorchJob whose rank 0 writes Pipes messages to S3. Only rank 0 talks to Dagster.
"""

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import dagster as dg
from pydantic import Field

from lm_assets.charts import inline_line_chart
from lm_assets.corpus.tokens.tokenizer import load_tokenizer
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices
from lm_assets.defs.common.environment import from_environment, unset_means
from lm_assets.defs.common.partitions import add_new_partitions, checkpoint_partitions
from lm_assets.defs.common.reporting import markdown_table
from lm_assets.defs.common.resources import S3ClientResource, StorageResource
from lm_assets.defs.common.sample_defaults import defaults_note, launchpad_default
from lm_assets.defs.training.kubernetes import ClusterSpec, KubernetesTrainingClient
from lm_assets.defs.training.process_group import ProcessFailed, run_in_process_group
from lm_assets.reporting.tables import significant
from lm_assets.storage.keys import UnsafeKeyError, check_name
from lm_assets.storage.layout import PACKED_FOLDER, TOKENIZER_KEYS, checkpoint_key, checkpoint_run_folder
from lm_assets.training.config import PRECISIONS, TrainConfig
from lm_assets.training.config import PRESETS as MODEL_PRESETS

TRAIN_DEFAULTS = TrainConfig()


def run_default(field: str, fallback):
    """training_run's default for `field`: the sample crawl's under `make ui`, else the program's."""
    return launchpad_default("training_run", field, fallback)

ModelPreset = choices("ModelPreset", MODEL_PRESETS)
Precision = choices("Precision", PRECISIONS)
TrainingBackend = choices("TrainingBackend", ("local", "kubernetes"))
LocalLauncher = choices("LocalLauncher", ("torchrun", "deepspeed"))
LocalDevice = choices("LocalDevice", ("cpu", "auto"))


class TrainingRunConfig(dg.Config):
    """The main knobs of lm_assets/training/config.py's TrainConfig; `overrides` reaches every other field."""

    model_config = ENUM_FIELDS_AS_VALUES

    run_name: str = Field(
        default="main",
        description="the run's name: its checkpoints go under `checkpoints/<run_name>/` and their partitions are "
        "`<run_name>-step_<n>`; a run of the same name resumes from its latest checkpoint",
    )
    model: ModelPreset = Field(
        default=run_default("model", TRAIN_DEFAULTS.model),
        description="a model preset of lm_assets/training/config.py: tiny, 125m, 350m or 1b"
    )
    steps: int = Field(default=run_default("steps", TRAIN_DEFAULTS.steps),
                       description="optimizer steps the run ends at" + defaults_note("training_run"))
    pp: int = Field(
        default=run_default("pp", TRAIN_DEFAULTS.parallel.pp),
        description="pipeline-parallel degree: stages the model's layers are split into",
    )
    tp: int = Field(default=run_default("tp", TRAIN_DEFAULTS.parallel.tp), description="tensor-parallel degree")
    # The launcher starts pp × tp × dp processes, so dp is given here (the program infers it when 0).
    dp: int = Field(default=run_default("dp", 1), description="data-parallel degree; the run has pp × tp × dp ranks")
    precision: Precision = Field(default=TRAIN_DEFAULTS.precision, description="fp32, bf16 or fp16 (fp16 needs zero_stage 1 or more)")
    zero_stage: int = Field(
        default=run_default("zero_stage", TRAIN_DEFAULTS.zero_stage),
        description="DeepSpeed ZeRO stage 0-3; with pipeline parallelism (pp > 1) at most 1"
    )
    micro_batch_size: int = Field(
        default=run_default("micro_batch_size", TRAIN_DEFAULTS.micro_batch_size),
        description="sequences per rank per micro-step",
    )
    grad_accum: int = Field(default=TRAIN_DEFAULTS.grad_accum, description="micro-steps accumulated into each optimizer step")
    lr: float = Field(
        default=run_default("lr", TRAIN_DEFAULTS.optim.lr),
        description="peak learning rate, reached after warmup and decayed by a cosine to a tenth of it"
    )
    warmup_steps: int = Field(
        default=run_default("warmup_steps", TRAIN_DEFAULTS.optim.warmup_steps),
        description="steps of linear warmup to lr",
    )
    save_every: int = Field(
        default=run_default("save_every", TRAIN_DEFAULTS.checkpoint.save_every),
        description="a checkpoint every this many steps, and one at the end; 0: only at the end"
    )
    seed: int = Field(default=TRAIN_DEFAULTS.seed, description="seeds the model's initialization (the data order has its own, data_seed)")
    peak_flops: float | None = Field(
        default=TRAIN_DEFAULTS.peak_flops,
        description="peak FLOP/s of one device, to report MFU, e.g. 989e12 for an H100 SXM or H200, 312e12 for an "
        "A100 (dense bf16); unset: no MFU",
    )
    val_batches: int = Field(
        default=TRAIN_DEFAULTS.validation.batches,
        description="micro-batches per data-parallel rank of the packed val split whose mean loss is the validation "
        "loss, measured at every checkpoint and the last step; 0: none",
    )
    max_seq_len: int | None = Field(
        default=run_default("max_seq_len", None),
        description="the model's context: the longest prompt evaluation can score whole (5-shot C-Eval needs "
        "about 1,200 tokens); unset: the packed sequence length, at least 128",
    )
    compile: bool | None = Field(
        default=TRAIN_DEFAULTS.compile, description="torch.compile each transformer block; unset: on for CUDA, off for CPU"
    )
    document_mask: bool = Field(
        default=TRAIN_DEFAULTS.document_mask,
        description="attend within each packed document only, positions restarting per document; off: whole rows",
    )
    overrides: list[str] = Field(
        default=[],
        description='"a.b=value" settings of any other field of lm_assets/training/config.py\'s TrainConfig, '
        'e.g. "optim.weight_decay=0.05"',
    )

    @property
    def world_size(self) -> int:
        return self.pp * self.tp * self.dp

    def train_config(self, data: str, checkpoint_dir: str, tokenizer_model: str, seq_len: int) -> dict:
        return {
            "data": data,
            "tokenizer_model": tokenizer_model,
            "model": self.model,
            "model_overrides": [f"max_seq_len={self.max_seq_len or max(seq_len, 128)}"],
            "parallel": {"pp": self.pp, "tp": self.tp, "dp": self.dp},
            "precision": self.precision,
            "zero_stage": self.zero_stage,
            "micro_batch_size": self.micro_batch_size,
            "grad_accum": self.grad_accum,
            "optim": {"lr": self.lr, "warmup_steps": self.warmup_steps},
            "seed": self.seed,
            "steps": self.steps,
            "compile": self.compile,
            "document_mask": self.document_mask,
            "checkpoint": {"dir": checkpoint_dir, "save_every": self.save_every, "resume": True},
            "validation": {"batches": self.val_batches},
            **({"peak_flops": self.peak_flops} if self.peak_flops else {}),
        }


class TrainingLauncher(dg.ConfigurableResource):
    """Where training runs: `local` (torchrun or deepspeed, CPU processes on gloo by default) or
    `kubernetes` (a Kubeflow PyTorchJob on `cluster`; see lm_assets/defs/training/kubernetes.py). On Kubernetes the
    storage root is a volume (`cluster.pvc_name`) that every pod mounts at `cluster.data_mount`."""

    model_config = ENUM_FIELDS_AS_VALUES

    backend: TrainingBackend | None = Field(
        default=None, description="local or kubernetes; " + unset_means("LM_ASSETS_TRAINING_BACKEND")
    )
    local_launcher: LocalLauncher = Field(
        default="torchrun", description="the local backend's launcher: torchrun or deepspeed"
    )
    device: LocalDevice = Field(
        default="cpu",
        description="the local backend's accelerator: cpu (CPU processes on gloo) or auto (DeepSpeed detects the "
        "accelerator: CUDA GPUs, one per rank)",
    )
    # Unset, so that the Launchpad does not write a Kubernetes block out for a local run.
    cluster: ClusterSpec | None = Field(
        default=None, description="the Kubernetes cluster of the kubernetes backend; unset: ClusterSpec's defaults"
    )
    pipes_bucket: str | None = Field(
        default=None,
        description="the S3 bucket Pipes messages go through on the kubernetes backend; "
        + unset_means("LM_ASSETS_PIPES_BUCKET", "none: the kubernetes backend refuses to start without one"),
    )
    s3: dg.ResourceDependency[S3ClientResource] = Field(description="the S3 client for the Pipes bucket")

    def backend_name(self) -> str:
        """The backend; unset, $LM_ASSETS_TRAINING_BACKEND, else local."""
        return from_environment(self.backend, "LM_ASSETS_TRAINING_BACKEND")

    def kubernetes_client(self) -> KubernetesTrainingClient:
        bucket = from_environment(self.pipes_bucket, "LM_ASSETS_PIPES_BUCKET")
        if not bucket:
            raise dg.Failure("the kubernetes backend needs pipes_bucket ($LM_ASSETS_PIPES_BUCKET): the S3 bucket Pipes messages go through")
        return KubernetesTrainingClient(self.s3.get_client(), bucket)

    def local_command(self, config_path: str, world_size: int, overrides: list[str]) -> list[str]:
        bin_dir = Path(sys.executable).parent
        if self.local_launcher == "torchrun":
            head = [str(bin_dir / "torchrun"), "--standalone", f"--nproc_per_node={world_size}"]
        elif self.local_launcher == "deepspeed":
            head = [str(bin_dir / "deepspeed"), "--num_nodes", "1", "--num_gpus", str(world_size), "--module"]
        else:
            raise dg.Failure(f"unknown local launcher {self.local_launcher!r}: use torchrun or deepspeed")
        module = ["lm_assets.training.train"] if self.local_launcher == "deepspeed" else ["-m", "lm_assets.training.train"]
        return [*head, *module, "--config", config_path, *overrides]

    def env(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if self.device == "cpu":
            env["DS_ACCELERATOR"] = "cpu"
        return env


def with_setting(train_config: dict, name: str, value) -> dict:
    """`train_config` with the field `name` ("a" or "a.b") set to `value`."""
    head, _, rest = name.partition(".")
    if not rest:
        return train_config | {head: value}
    return train_config | {head: with_setting(dict(train_config.get(head) or {}), rest, value)}


def rank_errors(folder: Path) -> str:
    """What the failing ranks wrote, first line of each, for the run's failure message."""
    files = sorted(folder.glob("rank_*.txt")) if folder.exists() else []
    lines = [f"{f.stem}: {f.read_text().splitlines()[0]}" for f in files]
    return ("training failed on " + "; ".join(lines)) if lines else ""


def local_paths(store, run_name: str, data_key: str = PACKED_FOLDER, tokenizer_key: str = TOKENIZER_KEYS["model"],
                **more_keys: str) -> dict[str, str]:  # fmt: skip
    try:
        check_name(run_name, "run name")
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
    try:
        return {
            "data": str(store.local_path(data_key)),
            "checkpoints": str(store.local_path(checkpoint_run_folder(run_name))),
            "tokenizer": str(store.local_path(tokenizer_key)),
            **{name: str(store.local_path(key)) for name, key in more_keys.items()},
        }
    except ValueError as exc:
        raise dg.Failure(
            f"training needs a file-system storage root, not {store.root}: the local backend reads the packed data and "
            "writes checkpoints there, and the kubernetes backend mounts it on every pod (training_launcher.cluster.pvc_name)"
        ) from exc


@dg.multi_asset(
    name="training_run",  # the op, and the key of its run config: `ops: {training_run: {config: ...}}`
    specs=[
        dg.AssetSpec("training_run", deps=["packed_dataset", "tokenizer"], group_name="training", kinds={"deepspeed", "pytorch"},
                     description="A DeepSpeed data x tensor x pipeline parallel training run: per-step loss, lr, grad "
                     "norm, tokens/s and MFU in the run log; final metrics and the loss curve as metadata."),
        dg.AssetSpec("checkpoint", deps=["packed_dataset", "tokenizer"], group_name="training", kinds={"deepspeed", "safetensors"},
                     description="The run's DeepSpeed checkpoints (each also a `checkpoints` partition) and a "
                     "consolidated HF export of the latest (model.safetensors, config.json, tokenizer)."),
    ],
)
def training_run_and_checkpoint(
    context: dg.AssetExecutionContext,
    config: TrainingRunConfig,
    storage: StorageResource,
    training_launcher: TrainingLauncher,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    yield from launch_training(context, config, storage, training_launcher, pipes_subprocess_client)


def launch_training(
    context: dg.AssetExecutionContext,
    config: TrainingRunConfig,
    storage: StorageResource,
    training_launcher: TrainingLauncher,
    pipes_subprocess_client: dg.PipesSubprocessClient,
    data_key: str = PACKED_FOLDER,
    tokenizer_key: str = TOKENIZER_KEYS["model"],
    path_settings: dict[str, str] | None = None,
    settings: dict | None = None,
):
    """Run lm_assets/training/ on the packed data at `data_key` with the tokenizer at `tokenizer_key`, locally or on
    Kubernetes, and yield what it reports through Pipes. `path_settings` are TrainConfig fields whose values
    are storage keys (e.g. `init_from`), resolved where the run reads them; `settings` are set as given."""
    store = storage.storage()
    backend = training_launcher.backend_name()
    if backend not in ("local", "kubernetes"):
        raise dg.Failure(f"unknown training backend {backend!r}: use local or kubernetes")
    path_settings = path_settings or {}
    paths = local_paths(store, config.run_name, data_key, tokenizer_key, **path_settings)
    if not Path(paths["data"], "manifest.json").exists():
        raise dg.Failure(f"no packed data at {paths['data']} yet: materialize what writes it first")
    run_dir = Path(paths["checkpoints"])
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "train_config.json"
    seq_len = json.loads(Path(paths["data"], "manifest.json").read_text())["seq_len"]
    vocab_size = load_tokenizer(Path(paths["tokenizer"]).read_bytes()).get_piece_size()
    train_config = (config.train_config(paths["data"], str(run_dir), paths["tokenizer"], seq_len) | {"vocab_size": vocab_size}
                    | (settings or {}))  # fmt: skip
    for name in path_settings:
        train_config = with_setting(train_config, name, paths[name])
    config_path.write_text(json.dumps(train_config, indent=2))
    if backend == "kubernetes":
        cluster = training_launcher.cluster or ClusterSpec()
        on_cluster = train_config | {
            "data": f"{cluster.data_mount}/{data_key}",
            "tokenizer_model": f"{cluster.data_mount}/{tokenizer_key}",
            "checkpoint": train_config["checkpoint"] | {"dir": f"{cluster.data_mount}/{checkpoint_run_folder(config.run_name)}"},
        }
        for name, key in path_settings.items():
            on_cluster = with_setting(on_cluster, name, f"{cluster.data_mount}/{key}")
        name = f"lm-assets-{config.run_name}-{context.run_id[:8]}"
        results = training_launcher.kubernetes_client().run(context, name, on_cluster, cluster)
    else:
        command = training_launcher.local_command(str(config_path), config.world_size, config.overrides)
        context.log.info("launching: " + " ".join(command))
        errors = run_dir / "errors"
        shutil.rmtree(errors, ignore_errors=True)
        env = training_launcher.env() | {"LM_ASSETS_ERROR_DIR": str(errors)}
        try:
            cwd = str(Path(__file__).resolve().parents[3])
            results = run_in_process_group(
                pipes_subprocess_client, command=command, context=context, env=env, cwd=cwd
            ).get_results()
        except ProcessFailed as exc:
            raise dg.Failure(description=rank_errors(errors) or str(exc)) from exc
    tags = [p.name for p in sorted(run_dir.iterdir()) if (p / "layout.json").exists()]
    keys = [checkpoint_key(config.run_name, tag) for tag in tags]
    add_new_partitions(context.instance, checkpoint_partitions, keys)
    run_asset = train_config.get("run_asset", "training_run")
    for result in results:
        result = with_spike_documents(with_curves(result), store, run_dir)
        if isinstance(result, dg.MaterializeResult) and result.asset_key == dg.AssetKey(run_asset):
            measured = result.metadata.get("model_states_measured_mib")
            plan = training_plan(config, train_config, getattr(measured, "value", measured))
            result = with_metadata(result, {"training_plan": plan}, first=RUN_STORY)
        yield result


# What training_run's overview shows first: how the loss went, then the rest as the run reported it.
RUN_STORY = ("curves", "reward_curve", "reward_accuracy_curve", "dpo_validation", "adapter", "final_loss", "min_loss", "min_loss_step", "loss_rose_at_end", "val_loss", "val_loss_step",
             "lr_curve", "checkpoints", "steps", "tokens", "tokens_per_s", "mfu", "training_plan")


def with_metadata(result: dg.MaterializeResult, extra: dict, first: tuple[str, ...] = ()) -> dg.MaterializeResult:
    """`result` with `extra` metadata added, the keys in `first` moved to the top in that order, everything
    else as it was."""
    metadata = {**result.metadata, **extra}
    metadata = {**{key: metadata[key] for key in first if key in metadata}, **metadata}
    return dg.MaterializeResult(
        asset_key=result.asset_key, metadata=metadata,
        check_results=result.check_results, data_version=result.data_version, tags=result.tags,
    )


def training_plan(config: TrainingRunConfig, train_config: dict, measured_mib: float | None = None) -> dg.MetadataValue:
    """What lm_assets/training/planner.py estimates this run's layout needs per GPU (`lm-assets plan-training` ranks
    the others), beside the model states rank 0 held when the run measured them."""
    from lm_assets.training.config import apply_overrides, from_preset, load_config
    from lm_assets.training.model import num_params
    from lm_assets.training.planner import Layout, ModelShape, estimate

    extra = load_config(None, config.overrides)  # the settings the overrides reach: offload, recomputation
    init_from = extra.init_from or train_config.get("init_from")
    if init_from:
        from lm_assets.training.hf_init import model_config

        model = apply_overrides(model_config(init_from), train_config["model_overrides"])
    else:
        model = apply_overrides(from_preset(config.model, train_config["vocab_size"]), train_config["model_overrides"])
    shape = ModelShape(params=num_params(model), layers=model.n_layers, hidden=model.dim, heads=model.n_heads,
                       vocab=model.vocab_size)
    layout = Layout(config.dp, config.tp, config.pp, config.zero_stage,
                    offload_optimizer=extra.offload.optimizer != "none", offload_param=extra.offload.param != "none",
                    activation_checkpointing=extra.activation_checkpointing)
    seq = model.max_seq_len
    found = estimate(shape, layout, seq, config.micro_batch_size, config.grad_accum, float("inf"),
                     mixed=config.precision != "fp32")
    measured = "—" if measured_mib is None else f"{measured_mib / 1024:.3f} GiB"
    return dg.MetadataValue.md(
        f"| layout | parameters | model states | measured | activations | total per GPU |\n|---|---|---|---|---|---|\n"
        f"| {layout.describe()} | {shape.params / 1e6:,.1f} M | {found.model_states_gib:.3f} GiB | {measured} | "
        f"{found.activations_gib:.3f} GiB | {found.total_gib:.3f} GiB |\n\n"
        "Estimated by `lm_assets/training/planner.py` at the model's context length (model states at the optimizer step's "
        "peak); measured: the tensors rank 0 held before an optimizer step. `lm-assets plan-training` ranks every layout."
    )


def with_spike_documents(result, store, run_dir: Path):
    """training_run's result with the documents of every spiked step's sequences (the file the run
    reported as `spike_forensics`) joined through lineage to their shards, URLs and WARC records: a table
    beside the checkpoints, `spike_documents.parquet`, its path and first rows in the metadata."""
    import json

    from lm_assets.corpus.audit.lineage import spike_documents

    reported = result.metadata.get("spike_forensics") if isinstance(result, dg.MaterializeResult) else None
    if reported is None or not Path(reported.value).exists():
        return result
    spikes = [json.loads(line) for line in Path(reported.value).read_text().splitlines() if line]
    documents = spike_documents(store, spikes)
    path = run_dir / "spike_documents.parquet"
    documents.write_parquet(path)
    shown = documents.select("step", "reason", "seq_index", "degenerate", "doc_id", "url", "shard", "record_index")
    return with_metadata(result, {"spike_documents": dg.MetadataValue.path(str(path)),
                                  "spike_documents_preview": markdown_table(shown.head(20))})


def with_curves(result):
    """training_run's result with its curves shown: `curves`, a small SVG of the train loss and the
    validation losses (dots), and `lr_curve`, one of the lr, drawn in place on the overview from the run's
    `steps.jsonl`; `curves_detail`, the run's PNG with axes."""
    if not isinstance(result, dg.MaterializeResult):
        return result
    extra = {}
    steps = result.metadata.get("steps_jsonl")
    if steps is not None and Path(steps.value).exists():
        history = [json.loads(line) for line in Path(steps.value).read_text().splitlines() if line]
        extra["curves"] = dg.MetadataValue.md(curves_markdown(history))
        if any(m.get("lr") is not None for m in history):
            extra["lr_curve"] = dg.MetadataValue.md(lr_markdown(history))
        if any(m.get("reward_margin") is not None for m in history):
            extra["reward_curve"] = dg.MetadataValue.md(reward_markdown(history))
        if any(m.get("reward_accuracy") is not None for m in history):
            extra["reward_accuracy_curve"] = dg.MetadataValue.md(reward_accuracy_markdown(history))
    if (table := dpo_validation_table(result.metadata)) is not None:
        extra["dpo_validation"] = dg.MetadataValue.md(table)
    png = result.metadata.get("curves_png")
    if png is not None and Path(png.value).exists():
        data = base64.b64encode(Path(png.value).read_bytes()).decode()
        extra["curves_detail"] = dg.MetadataValue.md(f"![loss and learning rate](data:image/png;base64,{data})")
    return with_metadata(result, extra) if extra else result


def curves_markdown(history: list[dict]) -> str:
    """The inline chart of a run's train loss and validation losses (dots), and its caption: first and last
    loss, the lowest and its step, the last validation loss. The lr is drawn apart (`lr_markdown`): on an
    axis of its own beside the loss, the chart would only fit the UI's inline limit with a handful of points."""
    losses = [(m["step"], m["loss"]) for m in history if m.get("loss") is not None]
    vals = [(m["step"], m["val_loss"]) for m in history if m.get("val_loss") is not None]
    if not losses:
        return "_no steps in this run_"
    low_step, low = min(losses, key=lambda item: item[1])
    caption = f"loss (blue) {losses[0][1]:.3f} → {losses[-1][1]:.3f}, lowest {low:.3f} at step {low_step}"
    if vals:
        caption += f" · val loss {vals[-1][1]:.3f} at step {vals[-1][0]} (red dots)"
    return inline_line_chart("loss", caption, [(losses, "blue")], [(vals, "red")] if vals else [])


def reward_markdown(history: list[dict]) -> str:
    """DPO's inline chart: the reward margin per step (chosen minus rejected reward), the validation margins
    as dots, the last reward accuracies in the caption."""
    margins = [(m["step"], m["reward_margin"]) for m in history if m.get("reward_margin") is not None]
    vals = [(m["step"], m["val_reward_margin"]) for m in history if m.get("val_reward_margin") is not None]
    last = history[-1]
    caption = (f"reward margin (green) {margins[0][1]:.3f} → {margins[-1][1]:.3f}, reward accuracy of the last step "
               f"{last.get('reward_accuracy', 0):.2f}")  # fmt: skip
    val = next((m for m in reversed(history) if m.get("val_reward_accuracy") is not None), None)
    if val is not None:
        caption += f" · held-back pairs: accuracy {val['val_reward_accuracy']:.2f}, margin {val['val_reward_margin']:.3f} (red dots)"
    return inline_line_chart("reward margin", caption, [(margins, "green")], [(vals, "red")] if vals else [])


def reward_accuracy_markdown(history: list[dict]) -> str:
    """DPO's inline chart of the reward accuracy per step (the share of pairs whose chosen answer the policy
    rewards above the rejected one), the held-back pairs' accuracy as dots; first, last and held-back in the caption."""
    accs = [(m["step"], m["reward_accuracy"]) for m in history if m.get("reward_accuracy") is not None]
    vals = [(m["step"], m["val_reward_accuracy"]) for m in history if m.get("val_reward_accuracy") is not None]
    caption = f"reward accuracy (green) {accs[0][1]:.2f} → {accs[-1][1]:.2f}"
    if vals:
        caption += f" · held-back pairs {vals[-1][1]:.2f} at step {vals[-1][0]} (red dots)"
    return inline_line_chart("reward accuracy", caption, [(accs, "green")], [(vals, "red")] if vals else [])


DPO_VALIDATION = (("reward accuracy", "val_reward_accuracy"), ("reward margin", "val_reward_margin"),
                  ("KL to the reference", "val_kl"))  # fmt: skip


def dpo_validation_table(metadata: dict) -> str | None:
    """The held-back pairs at the start and the end, every column at four decimals, from the run's numbers
    (`val_reward_accuracy_start`, `val_reward_accuracy`, ...); None when the run reported none."""
    def value(key):
        entry = metadata.get(key)
        return None if entry is None else getattr(entry, "value", entry)

    rows = [(when, [value(f"{key}{suffix}") for _, key in DPO_VALIDATION]) for when, suffix in (("start", "_start"), ("end", ""))]
    if not any(v is not None for _, values in rows for v in values):
        return None
    cell = lambda v: "–" if v is None else f"{float(v):.4f}"  # noqa: E731
    lines = ["| held-back pairs | " + " | ".join(name for name, _ in DPO_VALIDATION) + " |", "|---|---|---|---|"]
    lines += [f"| {when} | " + " | ".join(cell(v) for v in values) + " |" for when, values in rows]
    return "\n".join(lines)


def lr_markdown(history: list[dict]) -> str:
    """The inline chart of a run's learning rate by step, its peak and last value in the caption."""
    lrs = [(m["step"], m["lr"]) for m in history if m.get("lr") is not None]
    peak_step, peak = max(lrs, key=lambda item: item[1])
    caption = f"lr peak {significant(peak)} at step {peak_step}, last {significant(lrs[-1][1])} at step {lrs[-1][0]}"
    return inline_line_chart("lr", caption, [(lrs, "orange")])
