"""The shipped quality classifier, and the labelled pages it is trained on.

`lm_assets/quality_model/` holds three files:

- `training_pages.parquet`: every labelled page of the project's dev sets (English and Chinese
  manuals, real web pages) in a compact form: the page's site, language, label, label set and
  collection (the Debian package or repository it comes from; the blogs are one), its
  tokens as fastText reads them (CRC-32 ids of the normalized text, `quality_classifier.token_ids`),
  and its `q_*` signals (the rules' and extraction's page signals), but not its text or HTML;
- `classifier.zip`: the classifier trained on all of them with a fixed seed (`build`);
- `classifier.json`: its hash, the training pages' hash, and its figures cross-validated by source
  and by site.

`curated_shard` uses the shipped classifier whenever the storage has no classifier of its own. A
user's labels train a classifier on the shipped pages plus theirs (`with_user_examples`). The same
pages and config give the same bytes, so `build` is checked to reproduce the shipped hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import polars as pl

from lm_assets.corpus.quality.classifier import (
    ClassifierConfig,
    QualityClassifier,
    TrainedClassifier,
    example_tokens,
    signal_frame,
    sites,
    train_classifier,
)

SHIPPED_FOLDER = Path(__file__).resolve().parents[2] / "quality_model"
PAGES_FILE, MODEL_FILE, INFO_FILE = "training_pages.parquet", "classifier.zip", "classifier.json"
# Every page trains the shipped model; its figures come from the cross-validations by source and by site.
SHIPPED_CONFIG = ClassifierConfig(test_fraction=0.0)
PAGE_COLUMNS = {
    "doc_id": pl.String, "url": pl.String, "site": pl.String, "lang": pl.String, "keep": pl.Boolean,
    "confidence": pl.String, "label_set": pl.String, "collection": pl.String, "tokens": pl.List(pl.UInt32),
}


def compact_pages(examples: pl.DataFrame, label_set: str, max_chars: int = SHIPPED_CONFIG.max_chars) -> pl.DataFrame:
    """Labelled pages (doc_id, url, text, lang, keep; confidence and extraction's page signals when
    present) in the shipped form: tokens and signals instead of text."""
    examples = examples.sort("doc_id")
    confidence = examples["confidence"] if "confidence" in examples.columns else pl.Series([None] * examples.height)
    frame = pl.DataFrame(
        {
            "doc_id": examples["doc_id"],
            "url": examples["url"] if "url" in examples.columns else [None] * examples.height,
            "site": sites(examples),
            "lang": examples["lang"],
            "keep": examples["keep"],
            "confidence": confidence,
            "label_set": [label_set] * examples.height,
            # The source cross-validation keeps whole: a user's labels are one collection.
            "collection": examples["collection"] if "collection" in examples.columns else [label_set] * examples.height,
            "tokens": example_tokens(examples, max_chars),
        },
        schema=PAGE_COLUMNS,
    )
    return pl.concat([frame, signal_frame(examples)], how="horizontal")


def pages_hash(pages: pl.DataFrame) -> str:
    """A content hash of training pages, independent of how the parquet file was written."""
    digest = hashlib.sha256()
    for row in pages.sort("doc_id").select(sorted(pages.columns)).iter_rows():
        digest.update(json.dumps(row, default=list, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def training_pages(folder: Path = SHIPPED_FOLDER) -> pl.DataFrame:
    return pl.read_parquet(folder / PAGES_FILE)


def build(pages: pl.DataFrame, config: ClassifierConfig = SHIPPED_CONFIG,
          cross_validations: tuple[str, ...] = ("source", "site")) -> TrainedClassifier:  # fmt: skip
    """The shipped classifier trained on `pages`: same pages and config, same bytes (whatever
    `cross_validations` it reports)."""
    return train_classifier(pages, config, cross_validations)


def write(folder: Path, pages: pl.DataFrame, trained: TrainedClassifier, config: ClassifierConfig = SHIPPED_CONFIG) -> dict:
    """Write the pages, the classifier and its record into `folder`; the record."""
    folder.mkdir(parents=True, exist_ok=True)
    pages.sort("doc_id").write_parquet(folder / PAGES_FILE, compression="zstd", compression_level=19, statistics=False)
    (folder / MODEL_FILE).write_bytes(trained.model)
    info = {
        "name": "lm_assets shipped quality classifier",
        "hash": trained.hash,
        "training_pages_hash": pages_hash(pages),
        "pages": pages.height,
        "by_label_set": {
            name: {"pages": n, "keep": keep, "sites": n_sites}
            for name, n, keep, n_sites in pages.group_by("label_set")
            .agg(pl.len(), pl.col("keep").sum(), pl.col("site").n_unique())
            .sort("label_set")
            .rows()
        },
        "config": asdict(config),
        "metrics": trained.metrics,
    }
    (folder / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return info


@functools.lru_cache(maxsize=2)
def shipped_classifier(folder: Path = SHIPPED_FOLDER) -> tuple[QualityClassifier, dict]:
    """The classifier the package ships and its record; refused when the two disagree."""
    if not (folder / MODEL_FILE).exists():
        raise FileNotFoundError(f"no shipped quality classifier at {folder / MODEL_FILE}; build it with `make quality-model`")
    classifier = QualityClassifier.from_bytes((folder / MODEL_FILE).read_bytes())
    info = json.loads((folder / INFO_FILE).read_text())
    if info.get("hash") != classifier.hash:
        raise ValueError(
            f"the shipped quality classifier's hash {classifier.hash} is not the one {folder / INFO_FILE} records "
            f"({info.get('hash')}); rebuild it with `make quality-model`"
        )
    return classifier, info


def with_user_examples(user: pl.DataFrame, shipped: pl.DataFrame | None = None) -> pl.DataFrame:
    """The training set for a user's labels: the shipped pages plus the user's (compacted), a user label
    replacing a shipped page of the same URL."""
    shipped = training_pages() if shipped is None else shipped
    theirs = compact_pages(user, "user")
    shipped = shipped.filter(~pl.col("url").is_in(theirs["url"].drop_nulls().implode()))
    return pl.concat([shipped, theirs], how="diagonal_relaxed")


def user_config(config: ClassifierConfig) -> ClassifierConfig:
    """A user's config, with the shipped model's token and signal settings (the shipped pages hold tokens of
    `max_chars` characters)."""
    return replace(config, max_chars=SHIPPED_CONFIG.max_chars)


def labelled_examples(shards: list[Path], labels: pl.DataFrame, html_only: bool = True) -> pl.DataFrame:
    """The labelled pages (labels: url, label KEEP/DROP, confidence) of a crawl's shards as the pipeline
    sees them at curation: read, extracted, and past language ID (pages it drops never reach a
    classifier), with the language it finds. With `html_only` False, documents read from text (a JSON Lines
    shard of extracted texts) are taken too."""
    from lm_assets.corpus.curation.extract import extract_documents
    from lm_assets.corpus.curation.langid import identify_languages
    from lm_assets.corpus.ingest.readers import read_shard

    wanted = labels["url"].implode()
    raw = pl.concat([read_shard(shard).documents.filter(pl.col("url").is_in(wanted)) for shard in shards],
                    how="diagonal_relaxed")
    if html_only:
        raw = raw.filter(pl.col("html").is_not_null())
    raw = raw.unique("url", keep="first", maintain_order=True)
    identified = identify_languages(extract_documents(raw).kept).kept
    labelled = labels.select("url", "confidence", (pl.col("label") == "KEEP").alias("keep"))
    return identified.join(labelled, on="url").sort("doc_id")
