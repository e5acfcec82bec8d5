"""The model card: a README.md in each checkpoint's HF export, written from what the assets recorded.

The card reads the Dagster instance, never the data: the latest materialization of the corpus-wide assets,
this checkpoint's partition of the evaluation assets and of compressed_checkpoint, and the training runs
that saved the checkpoint and the ones it started from. lm_assets/reporting/model_card.py arranges it."""

import os
from pathlib import Path

import dagster as dg
import yaml
from pydantic import Field, model_validator

from lm_assets.defs.common.environment import project_dir, project_path
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import latest_metadata
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.compression.jobs import model_card_job
from lm_assets.defs.evaluation.common import hf_export
from lm_assets.reporting.model_card import DATA_ASSETS, EVALUATION_ASSETS, checkpoint_from_export, render_card
from lm_assets.storage.layout import checkpoint_run_folder, parse_checkpoint_key

# The assets whose checkpoints are `checkpoints` partitions, and the run asset that saved them.
RUN_ASSETS = {"checkpoint": "training_run", "sft_checkpoint": "sft_run", "dpo_checkpoint": "dpo_run",
              "distill_checkpoint": "distill_run"}
HISTORY = 100  # materializations of a checkpoint or run asset searched for the run that saved a checkpoint
CARD = "README.md"


class ModelCardConfig(dg.Config):
    license: str | None = Field(
        default=None, description="the model's licence, a Hugging Face licence id (apache-2.0, mit, ...); unset: "
        "`other` with `license_name: undeclared`, or the `license` of data_licences_file",
    )
    data_licences: dict[str, str] = Field(
        default_factory=dict, description="the licence of each data source (source -> licence), shown on the card; "
        "added to (and overriding) data_licences_file's",
    )
    data_licences_file: str | None = Field(
        default=None, description="a YAML file declaring the data sources' licences: `sources: {source: licence}` "
        "and optionally the model's `license` (data/licences/sample-crawl.yaml declares the sample crawl's)",
    )

    @model_validator(mode="before")
    @classmethod
    def _project_paths(cls, data):
        if isinstance(data, dict) and data.get("data_licences_file"):
            data = {**data, "data_licences_file": project_path(data["data_licences_file"])}
        return data


def shown_path(path: str) -> str:
    """A path inside the project as the project names it (data/licences/...), any other whole."""
    return os.path.relpath(path, project_dir()) if Path(path).resolve().is_relative_to(project_dir().resolve()) else path


def declared_licences(config: ModelCardConfig) -> dict:
    """The licences the user declared: the file's, then the config's over them."""
    declared = {}
    if config.data_licences_file:
        path = Path(config.data_licences_file)
        if not path.is_file():
            raise dg.Failure(f"data_licences_file {path} does not exist")
        declared = yaml.safe_load(path.read_text()) or {}
        if not isinstance(declared, dict) or not isinstance(declared.get("sources", {}), dict):
            raise dg.Failure(f"{path}: expected `sources:` mapping each source to its licence")
    sources = {str(k): str(v) for k, v in (declared.get("sources") or {}).items()} | config.data_licences
    where = [shown_path(config.data_licences_file)] if declared.get("sources") else []
    where += ["model_card's config"] if config.data_licences else []
    return {"model": config.license or declared.get("license"), "sources": sources, "declared_in": " and ".join(where)}


def plain(metadata: dict | None) -> dict | None:
    """Metadata values as plain Python (numbers, text, markdown, JSON), the rest left out."""
    if metadata is None:
        return None
    values = {key: getattr(value, "value", value) for key, value in metadata.items()}
    return {key: v for key, v in values.items() if v is None or isinstance(v, (str, int, float, bool, list, dict))}


def latest(instance: dg.DagsterInstance, asset: str) -> dict | None:
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return plain(event.asset_materialization.metadata) if event and event.asset_materialization else None


def every_partition(instance: dg.DagsterInstance, asset: str) -> list[dict]:
    """The latest metadata of each partition of a per-shard asset that is still registered."""
    key = dg.AssetKey(asset)
    registered = set(instance.get_dynamic_partitions("shards"))
    found = [latest_metadata(instance, key, p) for p in sorted(instance.get_materialized_partitions(key) & registered)]
    return [plain(m) for m in found if m is not None]


def saved_by(instance: dg.DagsterInstance, checkpoint: str) -> dict:
    """The checkpoint asset's materialization that listed `checkpoint` and the run asset's of the same run."""
    run, tag = parse_checkpoint_key(checkpoint)
    for asset, run_asset in RUN_ASSETS.items():
        for record in instance.fetch_materializations(dg.AssetKey(asset), limit=HISTORY).records:
            saved = plain(record.asset_materialization.metadata)
            if Path(str(saved.get("checkpoint_dir", ""))).name == run and tag in (saved.get("tags") or []):
                runs = instance.fetch_materializations(dg.AssetKey(run_asset), limit=HISTORY).records
                made = next((r for r in runs if r.run_id == record.run_id), None)
                return {"checkpoint": checkpoint, "tag": tag, "run_asset": run_asset, "saved": saved,
                        "run": plain(made.asset_materialization.metadata) if made else None}  # fmt: skip
    return {"checkpoint": checkpoint, "tag": tag, "run_asset": "training run", "saved": None, "run": None}


def lineage(instance: dg.DagsterInstance, checkpoint: str) -> list[dict]:
    """The runs that made the checkpoint: the one that saved it, then the one whose checkpoint it started from."""
    stages = []
    while checkpoint and len(stages) < len(RUN_ASSETS) + 1 and checkpoint not in {s["checkpoint"] for s in stages}:
        stage = saved_by(instance, checkpoint)
        stages.append(stage)
        checkpoint = checkpoint_from_export(((stage["run"] or {}).get("init_from") or {}).get("folder"))
    return stages


def card_inputs(instance: dg.DagsterInstance, checkpoint: str, licences: dict) -> dict:
    """Everything the card shows, from the instance's latest materializations."""
    partition = lambda asset: plain(latest_metadata(instance, dg.AssetKey(asset), checkpoint))
    return {
        "checkpoint": checkpoint,
        "lineage": lineage(instance, checkpoint),
        "data": {asset: latest(instance, asset) for asset in DATA_ASSETS},
        "decontamination": every_partition(instance, "decontaminated_shard"),
        "evaluation": {asset: partition(asset) for asset in EVALUATION_ASSETS},
        "compression": partition("compressed_checkpoint"),
        "licences": licences,
    }


def shard_dep(asset: str) -> dg.AssetDep:
    return dg.AssetDep(asset, partition_mapping=dg.AllPartitionMapping())


@dg.asset(
    partitions_def=checkpoint_partitions, group_name="compression", kinds={"markdown"},
    deps=[*DATA_ASSETS, shard_dep("decontaminated_shard"), *RUN_ASSETS, *RUN_ASSETS.values(), *EVALUATION_ASSETS,
          "compressed_checkpoint"],
    description="The checkpoint's model card, `README.md` in its HF export: the training data (documents dropped by "
    "rule, duplicates, decontamination, tokens, languages), the runs that trained it with their loss curves "
    "summarised, every benchmark score beside its chance level, safety and bias, the compressed variants and what "
    "they cost, and the licences declared for the data sources. Every figure is an asset's recorded metadata; a "
    "section whose asset was never materialized says so.",
)  # fmt: skip
def model_card(context: dg.AssetExecutionContext, config: ModelCardConfig, storage: StorageResource) -> dg.MaterializeResult:
    checkpoint = context.partition_key
    store = storage.storage()
    run, tag = parse_checkpoint_key(checkpoint)
    export = f"{checkpoint_run_folder(run)}/{tag}/hf"
    if not store.exists(f"{export}/config.json"):
        hf_export(store, checkpoint)  # the run saved no export: made now, as the evaluation does
    text, sections = render_card(card_inputs(context.instance, checkpoint, declared_licences(config)))
    uri = store.write_bytes(f"{export}/{CARD}", text.encode())
    front, body = text.removeprefix("---\n").split("\n---\n", 1)
    gaps = [name for name, state in sections.items() if state != "complete"]
    context.log.info(f"model card of {checkpoint}: {uri}; sections with gaps: {', '.join(gaps) or 'none'}")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(uri),
        "sections": dg.MetadataValue.json(sections),
        "front_matter": dg.MetadataValue.md(f"```yaml\n{front}\n```"),
        "card": dg.MetadataValue.md(body),
    })  # fmt: skip


def cards_due(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(checkpoint, run key) of each checkpoint evaluated by every evaluation asset whose card is not yet written
    from what it has: one card once it is evaluated, another once its compressed variants are measured."""
    from lm_assets.defs.evaluation.assets import EVALUATION_KEYS

    checkpoints = instance.get_dynamic_partitions(checkpoint_partitions.name)
    evaluated = set(checkpoints)
    for key in EVALUATION_KEYS:
        evaluated &= instance.get_materialized_partitions(key)
    compressed = instance.get_materialized_partitions(dg.AssetKey("compressed_checkpoint"))
    return [(k, f"model_card:{k}" + (":compressed" if k in compressed else "")) for k in checkpoints if k in evaluated]


@dg.sensor(job=model_card_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Writes the model card of every checkpoint evaluated by each evaluation asset, and again once "
           "its compressed variants are measured.")
def model_card_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    due = cards_due(context.instance)
    if not due:
        return dg.SensorResult(skip_reason="no checkpoint evaluated by every evaluation asset yet")
    return dg.SensorResult(run_requests=[dg.RunRequest(partition_key=k, run_key=key) for k, key in due])
