"""quality_labels and quality_classifier: pages judged by people (or a model) become a trained
classifier that curated_shard scores every document with.

Labels are JSONL files under `labels/` in the storage root or the landing location (the format is in
lm_assets/corpus/quality_labels.py); each new or edited file is a new version of `quality_labels`.
A trained classifier is stored under its hash and becomes the current one only when its held-back
balanced accuracy clears the configured floor.
"""

import json

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.corpus.langid import LangIdConfig, identify
from lm_assets.corpus.quality_classifier import FEATURES, ClassifierConfig, train_classifier
from lm_assets.corpus.quality_labels import files_version, match_labels, read_label_file
from lm_assets.defs.config import ENUM_FIELDS_AS_VALUES, choices, to_dataclass
from lm_assets.defs.curation.assets import extracted_shard
from lm_assets.defs.partitions import shards_with
from lm_assets.defs.reporting import markdown_table
from lm_assets.defs.resources import LandingResource, StorageResource
from lm_assets.layout import (
    CURRENT_CLASSIFIER,
    LABELS_FOLDER,
    LABEL_KEYS,
    QUALITY_LABELS_FOLDER,
    classifier_folder,
    classifier_keys,
    stage_keys,
)



def label_files(*stores) -> dict[str, bytes]:
    """Every `labels/*.jsonl` of the given stores, named `<root>/<key>`."""
    return {
        f"{store.root}/{key}": store.read_bytes(key)
        for store in stores
        for key in store.list(LABELS_FOLDER)
        if key.endswith(".jsonl")
    }


def counts(frame: pl.DataFrame, column: str) -> dict:
    return dict(sorted(frame[column].fill_null("?").value_counts().rows())) if frame.height else {}


@dg.asset(
    deps=[extracted_shard],
    group_name="quality",
    kinds={"polars"},
    description="Pages labelled KEEP or DROP (or scored 0-5) by people or a model, from JSONL files under labels/ "
    "in the storage root or the landing location, joined to their extracted documents; unmatched labels listed.",
)
def quality_labels(context: dg.AssetExecutionContext, storage: StorageResource, landing: LandingResource) -> dg.MaterializeResult:
    store = storage.storage()
    files = label_files(store, landing.storage())
    if not files:
        raise dg.Failure(
            f"no label files: add JSONL files under {LABELS_FOLDER}/ in the storage root ({store.root}) or the landing "
            "location; see `lm-assets label` and lm_assets/corpus/quality_labels.py for the format"
        )
    read = [read_label_file(data, name) for name, data in sorted(files.items())]
    labels, rejected = pl.concat([r[0] for r in read]), pl.concat([r[1] for r in read])
    shards = shards_with(context.instance, store, lambda s: stage_keys("extracted", s)["documents"])
    docs = pl.concat(
        [store.read_parquet(stage_keys("extracted", s)["documents"], columns=["doc_id", "url", "source", "text"]) for s in shards]
    ) if shards else pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "source": pl.String, "text": pl.String})
    examples, unmatched = match_labels(labels, docs)
    examples = examples.with_columns(pl.Series("lang", identify(examples["text"].to_list(), LangIdConfig())[0], dtype=pl.String))
    version = files_version(files)
    store.publish(QUALITY_LABELS_FOLDER, {
        "examples.parquet": examples, "unmatched.parquet": unmatched, "rejected.parquet": rejected,
        "summary.json": json.dumps({"version": version, "files": sorted(files), "shards": shards}).encode(),
    })
    return dg.MaterializeResult(
        metadata={
            "label_files": dg.MetadataValue.json(sorted(files)),
            "labels_version": version,
            "labels_read": labels.height,
            "examples": examples.height,
            "by_label": dg.MetadataValue.json({"KEEP": int(examples["keep"].sum()), "DROP": int((~examples["keep"]).sum())}),
            "by_language": dg.MetadataValue.json(counts(examples, "lang")),
            "by_source": dg.MetadataValue.json(counts(examples, "source")),
            "unmatched": unmatched.height,
            "unmatched_labels": markdown_table(unmatched.select("file", "line", "url", "doc_id", "label")),
            "rejected_lines": rejected.height,
            "rejected": markdown_table(rejected),
            "shards_searched": len(shards),
        },
        data_version=dg.DataVersion(version),
    )


CLASSIFIER_DEFAULTS = ClassifierConfig()
ClassifierFeatures = choices("ClassifierFeatures", FEATURES)


class QualityClassifierConfig(dg.Config):
    model_config = ENUM_FIELDS_AS_VALUES

    seed: int = Field(
        default=CLASSIFIER_DEFAULTS.seed, description="seeds the held-back split, the folds, fastText and the stacker"
    )
    test_fraction: float = Field(
        default=CLASSIFIER_DEFAULTS.test_fraction,
        description="share of the labels held back for the reported figures, stratified by language and label; "
        "0: out-of-fold figures instead",
    )
    features: ClassifierFeatures = Field(
        default=CLASSIFIER_DEFAULTS.features,
        description="text+signals: fastText's score stacked with the quality rules' q_* signals; text: fastText alone",
    )
    # The asset's own, not a ClassifierConfig field.
    min_balanced_accuracy: float = Field(
        default=0.75,
        description="held-back balanced accuracy (0-1) the classifier needs to become the current one; below it, "
        "it is stored but curated_shard keeps the previous one",
    )


@dg.asset(
    deps=[quality_labels],
    group_name="quality",
    kinds={"fasttext", "sklearn"},
    check_specs=[
        dg.AssetCheckSpec(
            "held_back_balanced_accuracy", asset="quality_classifier", blocking=True,
            description="Balanced accuracy on the held-back labels clears the configured floor; below it the "
            "classifier is stored but not made current.",
        )
    ],
    description="A fastText classifier of pretraining quality, trained with a fixed seed on a split of the labels "
    "and measured on the rest; curated_shard scores every document with the current one.",
)
def quality_classifier(
    context: dg.AssetExecutionContext, config: QualityClassifierConfig, storage: StorageResource
) -> dg.MaterializeResult:
    store = storage.storage()
    examples = store.read_parquet(LABEL_KEYS["examples"])
    labels_version = json.loads(store.read_bytes(LABEL_KEYS["summary"]))["version"]
    try:
        trained = train_classifier(examples, to_dataclass(ClassifierConfig, config, exclude=("min_balanced_accuracy",)))
    except ValueError as exc:
        raise dg.Failure(description=f"cannot train on these labels: {exc}") from exc
    metrics = trained.metrics
    info = {"hash": trained.hash, "labels_version": labels_version, "config": config.model_dump(), "metrics": metrics}
    keys = classifier_keys(trained.hash)
    store.publish(classifier_folder(trained.hash), {"model.bin": trained.model, "info.json": json.dumps(info, indent=1).encode()})
    passed = metrics["balanced_accuracy"] >= config.min_balanced_accuracy
    if passed:
        store.write_bytes(CURRENT_CLASSIFIER, json.dumps({"hash": trained.hash}).encode())
    confusion = metrics["confusion"]
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(keys["model"])),
            "classifier_hash": trained.hash,
            "current": passed,
            "labels_version": labels_version,
            **{k: metrics[k] for k in ("precision", "recall", "balanced_accuracy", "roc_auc", "threshold", "n_train", "n_test")},
            "threshold_reason": metrics["threshold_reason"],
            "confusion_matrix": markdown_table(pl.DataFrame({
                "label": ["KEEP", "DROP"],
                "predicted KEEP": [confusion["tp"], confusion["fp"]],
                "predicted DROP": [confusion["fn"], confusion["tn"]],
            })),
            "per_language": dg.MetadataValue.json(metrics.get("per_language", {})),
            "features": metrics.get("features", config.features),
            "model_bytes": len(trained.model),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="held_back_balanced_accuracy", passed=passed,
                metadata={"balanced_accuracy": metrics["balanced_accuracy"], "floor": config.min_balanced_accuracy},
            )
        ],
    )
