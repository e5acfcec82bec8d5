"""quality_labels and quality_classifier: pages judged by people (or a model) become a trained
classifier that curated_shard scores every document with.

Labels are JSONL files under `labels/` in the storage root or the landing location (the format is in
lm_assets/corpus/quality/labels.py); each new or edited file is a new version of `quality_labels`.
A trained classifier is stored under its hash and becomes the current one only when its held-back
balanced accuracy clears the configured floor.
"""

import json

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.corpus.curation.extract import PAGE_COLUMNS
from lm_assets.corpus.curation.langid import LangIdConfig, identify
from lm_assets.corpus.quality.classifier import FEATURES, ClassifierConfig, train_classifier
from lm_assets.corpus.quality.labels import LABEL_SCHEMA, REJECTED_SCHEMA, files_version, match_labels, read_label_file
from lm_assets.corpus.quality.shipped import shipped_classifier, user_config, with_user_examples
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices, to_dataclass
from lm_assets.defs.common.partitions import shards_with
from lm_assets.defs.common.reporting import markdown_table
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.curation.assets import extracted_shard
from lm_assets.storage.layout import (
    CURRENT_CLASSIFIER,
    LABEL_KEYS,
    LABELS_FOLDER,
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


NO_LABELS = "no-labels"


def labelled_documents(store, shard: str) -> pl.DataFrame:
    """What a label is matched to: a shard's extracted documents, with the page signals extraction recorded."""
    key = stage_keys("extracted", shard)["documents"]
    names = store.scan_parquet(key).collect_schema().names()
    return store.read_parquet(key, columns=[c for c in ("doc_id", "url", "source", "text", *PAGE_COLUMNS) if c in names])


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
    read = [read_label_file(data, name) for name, data in sorted(files.items())]
    labels = pl.concat([r[0] for r in read]) if read else pl.DataFrame(schema=LABEL_SCHEMA)
    rejected = pl.concat([r[1] for r in read]) if read else pl.DataFrame(schema=REJECTED_SCHEMA)
    shards = shards_with(context.instance, store, lambda s: stage_keys("extracted", s)["documents"]) if files else []
    docs = pl.concat([labelled_documents(store, s) for s in shards], how="diagonal_relaxed") if shards else (
        pl.DataFrame(schema={"doc_id": pl.String, "url": pl.String, "source": pl.String, "text": pl.String})
    )
    examples, unmatched = match_labels(labels, docs)
    examples = examples.with_columns(pl.Series("lang", identify(examples["text"].to_list(), LangIdConfig())[0], dtype=pl.String))
    version = files_version(files) if files else NO_LABELS
    store.publish(QUALITY_LABELS_FOLDER, {
        "examples.parquet": examples, "unmatched.parquet": unmatched, "rejected.parquet": rejected,
        "summary.json": json.dumps({"version": version, "files": sorted(files), "shards": shards}).encode(),
    })
    shipped, shipped_info = shipped_classifier()
    in_use = (
        f"no label files under {LABELS_FOLDER}/ in the storage root ({store.root}) or the landing location: "
        f"curated_shard uses the shipped classifier {shipped.hash} (trained on {shipped_info['pages']} labelled pages). "
        "Labels added there train a classifier on the shipped pages plus yours; see `lm-assets label`."
        if not files else
        f"quality_classifier trains on these {examples.height} labelled pages plus the {shipped_info['pages']} the package ships"
    )
    return dg.MaterializeResult(
        metadata={
            "classifier_in_use": in_use,
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
    "and measured on the rest, and cross-validated by source (each labelled collection left out whole) beside by "
    "site; its scores calibrated per language on the source-out scores, each language's reliability curve shown; "
    "curated_shard scores every document with the current one.",
)
def quality_classifier(
    context: dg.AssetExecutionContext, config: QualityClassifierConfig, storage: StorageResource
) -> dg.MaterializeResult:
    store = storage.storage()
    examples = store.read_parquet(LABEL_KEYS["examples"])
    labels_version = json.loads(store.read_bytes(LABEL_KEYS["summary"]))["version"]
    if examples.height == 0:
        return shipped_in_use(store, labels_version)
    training = with_user_examples(examples)
    try:
        trained = train_classifier(
            training, user_config(to_dataclass(ClassifierConfig, config, exclude=("min_balanced_accuracy",)))
        )
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
            **{k: metrics[k] for k in ("precision", "recall", "balanced_accuracy", "roc_auc", "n_train", "n_test")},
            "threshold": float(f"{metrics['threshold']:.4g}"),
            "threshold_reason": metrics["threshold_reason"],
            "confusion_matrix": markdown_table(pl.DataFrame({
                "label": ["KEEP", "DROP"],
                "predicted KEEP": [confusion["tp"], confusion["fp"]],
                "predicted DROP": [confusion["fn"], confusion["tn"]],
            })),
            "per_language": dg.MetadataValue.json(metrics.get("per_language", {})),
            "thresholds": dg.MetadataValue.json(cuts(metrics["thresholds"])),
            **transfer_metadata(metrics),
            "trained_on": dg.MetadataValue.json({
                "your labelled pages": examples.height,
                "shipped labelled pages": training.height - examples.height,
            }),
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


def cuts(thresholds: dict) -> dict:
    """Thresholds at four significant digits, as every page writes a cut (`cut_text`)."""
    return {k: float(f"{v:.4g}") if isinstance(v, (int, float)) else v for k, v in thresholds.items()}


def transfer_table(metrics: dict) -> dg.MetadataValue:
    """Balanced accuracy cross-validated by source and by site, side by side, with the gap, per labelled set
    and language: the by-site figure flatters a model by how much its sources share. A language or set
    neither figure covers is left out."""
    source_out, by_site = metrics["cross_validated"], metrics["cross_validated_by_site"]
    rows = []

    def add(name, out, site):
        a, b = out.get("balanced_accuracy"), site.get("balanced_accuracy")
        if a is None and b is None:  # no labels of this language (or set): no row, rather than an empty one
            return
        rows.append({"pages": name, "source-out": a, "by site": b,
                     "gap": round(b - a, 4) if a is not None and b is not None else None})  # fmt: skip

    add("all", source_out, by_site)
    for lang, row in source_out["per_language"].items():
        add(lang, row, by_site["per_language"].get(lang, {}))
    for name, row in source_out["per_label_set"].items():
        other = by_site["per_label_set"].get(name, {})
        add(f"set {name}", row, other)
        for lang, part in row["per_language"].items():
            add(f"set {name}, {lang}", part, other.get("per_language", {}).get(lang, {}))
    return markdown_table(pl.DataFrame(rows), max_rows=50)


def reliability_table(metrics: dict) -> dg.MetadataValue:
    """Each language's reliability curve: calibrated source-out scores in bins, against the share of KEEP."""
    rows = [{"language": lang, **row} for lang, table in metrics["reliability"].items() for row in table]
    return markdown_table(pl.DataFrame(rows), max_rows=60)


def transfer_metadata(metrics: dict) -> dict:
    if "cross_validated_by_site" not in metrics:  # an artefact trained before source-out figures
        return {}
    out = {
        "source_out_balanced_accuracy": metrics["cross_validated"]["balanced_accuracy"],
        "by_site_balanced_accuracy": metrics["cross_validated_by_site"]["balanced_accuracy"],
        "source_out_vs_by_site": transfer_table(metrics),
        "reliability": reliability_table(metrics),
    }
    if "text_path" in metrics:
        # Every page scored as a document without HTML, by the text model that scores such documents.
        text = metrics["text_path"]
        out |= {
            "text_path_source_out_balanced_accuracy": text["cross_validated"]["balanced_accuracy"],
            "text_path_by_site_balanced_accuracy": text["cross_validated_by_site"]["balanced_accuracy"],
            "text_path_source_out_vs_by_site": transfer_table(text),
            "text_path_reliability": reliability_table(text),
            "text_model_thresholds": dg.MetadataValue.json(cuts(metrics.get("text_model_thresholds") or {})),
        }
    return out


def shipped_in_use(store, labels_version: str) -> dg.MaterializeResult:
    """No labels of this storage's own: the shipped classifier is made current, and its record reported."""
    classifier, info = shipped_classifier()
    store.write_bytes(CURRENT_CLASSIFIER, json.dumps({"shipped": True, "hash": classifier.hash}).encode())
    metrics = info["metrics"]
    cross_validated = metrics["cross_validated"]
    label_sets = ", ".join(f"{name}: {counts['pages']}" for name, counts in info["by_label_set"].items())
    return dg.MaterializeResult(
        metadata={
            "classifier_hash": classifier.hash,
            "origin": "shipped",
            "current": True,
            "labels_version": labels_version,
            "note": "no labels of your own: curated_shard uses the classifier the package ships, trained on "
            f"{info['pages']} labelled pages ({label_sets})",
            "balanced_accuracy": cross_validated["balanced_accuracy"],
            "evaluated_on": cross_validated["evaluated_on"],
            "per_language": dg.MetadataValue.json(cross_validated["per_language"]),
            "thresholds": dg.MetadataValue.json(cuts(metrics["thresholds"])),
            "n_train": metrics["n_train"],
            **transfer_metadata(metrics),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="held_back_balanced_accuracy", passed=True,
                metadata={"balanced_accuracy": cross_validated["balanced_accuracy"], "origin": "shipped"},
            )
        ],
    )
