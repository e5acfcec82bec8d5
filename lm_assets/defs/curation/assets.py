"""extracted_shard and curated_shard: main text out of HTML, then language ID, quality, toxicity and PII."""


import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field, model_validator

from lm_assets.corpus.curation.extract import CONTROL_CHARS, EXTRACTED, EXTRACTORS, ExtractConfig, ExtractionRun
from lm_assets.corpus.curation.histograms import (
    LANG_SCORE,
    Histogram,
    figure_png,
    from_json,
    summed,
    to_json,
)
from lm_assets.corpus.curation.pii import find_pii
from lm_assets.corpus.curation.pipeline import CURATION_BATCH_ROWS, FILTERS, STEPS, CurationConfig, CurationRun
from lm_assets.corpus.curation.policy import POLICIES, check_targets, language_name
from lm_assets.corpus.curation.rules import DEFAULT_PRESET, PRESETS, RulesConfig, preset, rule_reasons
from lm_assets.corpus.curation.rules import STAGE as RULES_STAGE
from lm_assets.corpus.quality.classifier import QualityClassifier
from lm_assets.corpus.quality.registry import (
    classifier_description,
    classifier_stale_shards,
    current_classifier,
    current_classifier_hash,
)
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices, to_dataclass
from lm_assets.defs.common.environment import fill_from_environment, loaded_default, unset_means
from lm_assets.defs.common.partitions import shard_asset, shard_partitions
from lm_assets.defs.common.reporting import (
    config_hash,
    payload_hash,
    document_previews,
    drop_audit_metadata,
    drop_metadata,
    length_histogram,
    markdown_table,
    cut_text,
)
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.toxicity import TOXICITY_DEFAULTS, ToxicityResource
from lm_assets.defs.common.stages import (
    CURATED_SCHEMA,
    EXTRACTED_SCHEMA,
    DocumentStage,
    StageCheck,
    StreamedDocuments,
    each_shard,
)
from lm_assets.defs.curation.quality_rules import RuleOverrides
from lm_assets.reporting.histograms import FIGURE_LEGEND, INLINE_LEGEND, figure_markdown, histogram_panels
from lm_assets.reporting.tables import significant
from lm_assets.storage.accounting import drop_example_ids
from lm_assets.storage.store import write_stream
from lm_assets.storage.layout import (
    effective_config_key,
    raw_keys,
    stage_folder,
    stage_keys,
)

# extracted_shard --------------------------------------------------------------------------------
EXTRACT_DEFAULTS = ExtractConfig()
Extractor = choices("Extractor", EXTRACTORS)


class ExtractedShardConfig(dg.Config):
    model_config = ENUM_FIELDS_AS_VALUES

    extractor: Extractor = Field(
        default=EXTRACT_DEFAULTS.extractor,
        description="main_content (default: chrome pruned on lexbor's DOM, Readability's root, text with its "
        "paragraphs, lists and code), resiliparse (its own main_content heuristics, flat), all_text",
    )
    unicode_form: str = Field(
        default=EXTRACT_DEFAULTS.unicode_form,
        description="Unicode normalization form applied to the text: NFC, NFKC, NFD or NFKD; empty: none",
    )
    keep_alt_texts: bool = Field(
        default=EXTRACT_DEFAULTS.keep_alt_texts,
        description="keep images' alt texts in the text (resiliparse and all_text only; main_content never does)",
    )
    time_budget_s: float | None = Field(
        default=EXTRACT_DEFAULTS.time_budget_s,
        description="seconds one page may take to extract; a page over it is quarantined as timeout; unset: no budget",
    )
    max_depth: int | None = Field(
        default=EXTRACT_DEFAULTS.max_depth,
        description="a page whose elements nest deeper is quarantined as timeout before it is parsed (the parse, "
        "which cannot be interrupted, grows with the square of the depth); unset: no limit",
    )


def extracted_counts(batch: pl.DataFrame) -> dict[str, int]:
    """What extracted_shard counts as its documents stream out: control characters left (its check) and HTML bytes."""
    if batch.height == 0:
        return {"control_chars": 0, "html_bytes": 0}
    return {"control_chars": int(batch["text"].str.count_matches(CONTROL_CHARS.pattern).sum()),
            "html_bytes": int(batch["html_bytes"].sum())}


def no_control_chars(kept: pl.DataFrame, facts: dict) -> tuple[bool, dict]:
    found = facts["control_chars"]
    return found == 0, {"found": found}


EXTRACTED_STAGE = DocumentStage(EXTRACTED, EXTRACTED_SCHEMA, whole_shard=False, checks=(
    StageCheck("no_control_chars", "No NUL or other control characters remain in the text.", no_control_chars,
               blocking=True),
))  # fmt: skip


@shard_asset(
    group_name="curation",
    kinds={"polars", "selectolax"},
    deps=["raw_shard"],
    check_specs=EXTRACTED_STAGE.check_specs(),
    description="Main text of each document with its paragraphs, lists and code blocks, Unicode-normalized, "
    "control characters stripped.",
)
def extracted_shard(
    context: dg.AssetExecutionContext, config: ExtractedShardConfig, storage: StorageResource
):
    yield from each_shard(context, lambda shard: extracted_shard_of(shard, config, storage))


def extracted_shard_of(shard: str, config: ExtractedShardConfig, storage: StorageResource) -> dg.MaterializeResult:
    # The kept table, until it is published, beside the partition: the next publish sweeps it if this dies.
    with storage.storage().work_folder(stage_folder("extracted", shard)) as work:
        return extract_shard(shard, config, storage, work)


def extract_shard(
    shard: str, config: ExtractedShardConfig, storage: StorageResource, work: Path
) -> dg.MaterializeResult:
    store = storage.storage()
    started = time.perf_counter()
    # The HTML is read a row group at a time, and the text written as it comes: one batch is held.
    run = ExtractionRun(to_dataclass(ExtractConfig, config))
    seen = StreamedDocuments(count=extracted_counts)
    batches = store.iter_parquet(raw_keys(shard)["documents"])
    streamed = write_stream(seen.watch(run.kept_batches(batches)), work / "documents.parquet")
    result, dropped_sources = run.result(seen.first.head(0))
    seconds = time.perf_counter() - started
    return EXTRACTED_STAGE.close(
        store, shard, result.stats["docs_in"], result, streamed=streamed, facts=dict(seen.counts),
        metadata={
            "extractor": result.stats["extractor"],
            "charset_detected": result.stats["charset_detected"],
            "control_chars_stripped": result.stats["control_chars_stripped"],
            "docs_with_control_chars": result.stats["docs_with_control_chars"],
            "batches": result.stats["batches"],
            "timeouts": result.stats["timeouts"],
            **drop_audit_metadata(result.dropped, dropped_sources),
            "text_length_histogram": length_histogram(seen.lengths()),
            **document_previews(seen.first, ["doc_id", "url", "title", "lang_hint", "text"]),
            "seconds": round(seconds, 3),
            "html_mb_per_second": round(seen.counts["html_bytes"] / 1e6 / seconds, 2) if seconds else 0.0,
            "config_hash": config_hash(config),
        },
    )


# curated_shard ----------------------------------------------------------------------------------
CURATION_DEFAULTS = CurationConfig()
LANGID_DEFAULTS = CURATION_DEFAULTS.langid
CurationStep = choices("CurationStep", STEPS)
QualityPreset = choices("QualityPreset", PRESETS)
QualityPolicy = choices("QualityPolicy", POLICIES)


class ToxicityRulesConfig(dg.Config):
    """What the toxicity step drops; which model scores is the `toxicity` resource (`ToxicityResource`)."""

    line_threshold: float = Field(
        default=TOXICITY_DEFAULTS.line_threshold, description="toxicity score (0-1) at or above which a line is toxic"
    )
    max_toxic_fraction: float = Field(
        default=TOXICITY_DEFAULTS.max_toxic_fraction,
        description="share of a document's characters in toxic lines at or above which it is dropped "
        "(toxicity:toxic_fraction)",
    )
    zh_max_flagged_ratio: float | None = Field(
        default=TOXICITY_DEFAULTS.zh_max_flagged_ratio,
        description="Chinese documents: share of their words that the Chinese lexicon flags as whole words "
        "(traditional and simplified alike) at or above which a document is dropped (toxicity:zh_flagged_words); "
        "null: not scored",
    )


class LanguageIdConfig(dg.Config):
    """`LangIdConfig`'s fields, with its defaults."""

    allowed: list[str] = Field(
        default=list(LANGID_DEFAULTS.allowed),
        description="language codes kept by language ID (fastText lid.176 codes such as en, zh)",
    )
    min_score: float = Field(
        default=LANGID_DEFAULTS.min_score,
        description="share of a document (0-1) the allowed languages must hold together, else it is dropped",
    )
    window_chars: int = Field(default=LANGID_DEFAULTS.window_chars, description="characters per window scored")
    max_windows: int = Field(default=LANGID_DEFAULTS.max_windows, description="windows spread over a document, at most")
    top_k: int = Field(default=LANGID_DEFAULTS.top_k, description="languages each window votes for, by probability")
    model_path: str | None = Field(default=None, description="a fastText language ID model; unset: the bundled one")


class CuratedShardConfig(dg.Config):
    model_config = ENUM_FIELDS_AS_VALUES

    order: list[CurationStep] = Field(
        default=list(CURATION_DEFAULTS.order),
        description="the curation steps in the order they run (langid, quality, toxicity, pii); a step left out "
        "does not run; langid must come before quality, and a classifier decides right after quality",
    )
    langid: LanguageIdConfig = Field(default=LanguageIdConfig(), description="the language ID step")
    language_share_bounds: dict[str, list[float]] = Field(
        default={"en": [0.05, 1.0], "zh": [0.05, 1.0]},
        description="language code -> [low, high] share of the kept documents; the language_share check warns "
        "outside these bounds",
    )
    quality_preset: QualityPreset = Field(
        default=DEFAULT_PRESET,
        description="the quality rules' base values: lm_assets (chosen on labelled manuals), published "
        "(Gopher+C4+FineWeb as published), or gopher, c4, fineweb alone",
    )
    quality_rules: RuleOverrides = Field(
        default=RuleOverrides(),
        description="thresholds by rule family on top of the preset: a field left unset keeps the preset's value; "
        "disabled switches single thresholds off",
    )
    quality_policy: QualityPolicy | None = Field(
        default=loaded_default("LM_ASSETS_QUALITY_POLICY", CURATION_DEFAULTS.policy),
        description="who decides quality: rules (the preset), classifier (the current quality_classifier, or the "
        "shipped one without labels of your own, after language ID and a minimum length) or both (either drops); "
        + unset_means("LM_ASSETS_QUALITY_POLICY", CURATION_DEFAULTS.policy),
    )
    classifier_threshold: float | None = Field(default=None, description="P(KEEP) below which the classifier drops, "
                                               "in every language; unset: each language's threshold chosen when it "
                                               "was trained, listed in quality_classifier's metadata and in each "
                                               "curated_shard's classifier_threshold")
    classifier_retention: dict[str, float] | None = Field(
        default=None, description="the classifier's cut as the share of good pages to keep, per language (`*`: the "
        "others), e.g. `{en: 0.9, zh: 0.95}`: the classifier's source-out scores of good pages give the cut; "
        "set at most one of classifier_threshold, classifier_retention and classifier_keep_rate")
    classifier_keep_rate: dict[str, float] | None = Field(
        default=None, description="the classifier's cut as the share of documents to keep, per language (`*`: the "
        "others), e.g. `{zh: 0.5}`: the highest-scoring share of each batch of 2,048 documents in that language is "
        "kept; set at most one of classifier_threshold, classifier_retention and classifier_keep_rate")
    toxicity: ToxicityRulesConfig = Field(
        default_factory=ToxicityRulesConfig, description="the toxicity step's drop rules (the `toxicity` resource "
        "is the model that scores)"
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(data, {"quality_policy": ("LM_ASSETS_QUALITY_POLICY", CURATION_DEFAULTS.policy)})

    @model_validator(mode="after")
    def _one_cut(self):
        check_targets(self.classifier_threshold, self.classifier_retention, self.classifier_keep_rate)
        return self

    def curation_config(self, toxicity: ToxicityResource, classifier: QualityClassifier | None = None) -> CurationConfig:
        return to_dataclass(CurationConfig, {
            "order": self.order,
            "langid": self.langid,
            "quality": quality_config(self.quality_preset, self.quality_rules.overrides()),
            "toxicity": toxicity.scorer_config(self.toxicity),
            "policy": self.quality_policy,
            "classifier": classifier,
            "threshold": self.classifier_threshold,
            "retention": self.classifier_retention,
            "keep_rate": self.classifier_keep_rate,
        })


def quality_config(name: str, overrides: dict[str, Any]) -> RulesConfig:
    try:
        return preset(name, **overrides)
    except (ValueError, TypeError) as exc:
        raise dg.Failure(str(exc)) from exc


def language_shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return {lang: n / total for lang, n in ranked} if total else {}


def pii_residue(texts: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for text in texts:
        for kind, _ in find_pii(text):
            found[kind] = found.get(kind, 0) + 1
    return found


LANG_COUNT, PII_COUNT = "lang:", "pii:"


def curated_counts(batch: pl.DataFrame) -> dict[str, int]:
    """What curated_shard counts as its documents stream out, for its checks: documents by language, PII
    left by kind."""
    languages = batch["lang"].value_counts().rows() if "lang" in batch.columns else []
    counts = {f"{LANG_COUNT}{lang}": n for lang, n in languages}
    return counts | {f"{PII_COUNT}{kind}": n for kind, n in pii_residue(batch["text"].to_list()).items()}


def counted(facts: dict, prefix: str) -> dict[str, int]:
    return {key.removeprefix(prefix): n for key, n in facts.items() if key.startswith(prefix) and n}


def no_pii_residue(kept: pl.DataFrame, facts: dict) -> tuple[bool, dict]:
    residue = counted(facts, PII_COUNT)
    return not residue, {"found": dg.MetadataValue.json(residue)}


def languages_within_bounds(kept: pl.DataFrame, facts: dict) -> tuple[bool, dict]:
    shares = language_shares(counted(facts, LANG_COUNT))
    out_of_bounds = {
        lang: round(shares.get(lang, 0.0), 3)
        for lang, (low, high) in facts["language_share_bounds"].items()
        if not low <= shares.get(lang, 0.0) <= high
    }
    return not out_of_bounds, {"shares": dg.MetadataValue.json(shares), "out_of_bounds": dg.MetadataValue.json(out_of_bounds)}


CURATED_STAGE = DocumentStage("curated", CURATED_SCHEMA, filters=FILTERS, checks=(
    StageCheck("pii_residue", "A regex scan of the output finds none of the redacted PII types.", no_pii_residue,
               blocking=True),
    StageCheck("language_share", "Each configured language's share of kept documents is within its bounds.",
               languages_within_bounds),
))  # fmt: skip


@shard_asset(
    group_name="curation",
    kinds={"polars", "fasttext", "sklearn"},
    deps=[extracted_shard, dg.AssetKey("quality_classifier")],
    check_specs=CURATED_STAGE.check_specs(),
    description="Documents that pass language ID, quality rules and toxicity, with PII redacted; scores kept as columns.",
)
def curated_shard(
    context: dg.AssetExecutionContext, config: CuratedShardConfig, storage: StorageResource, toxicity: ToxicityResource
):
    yield from each_shard(context, lambda shard: curated_shard_of(shard, config, storage, toxicity))


def curated_shard_of(shard: str, config: CuratedShardConfig, storage: StorageResource,
                     toxicity: ToxicityResource) -> dg.MaterializeResult:
    with storage.storage().work_folder(stage_folder("curated", shard)) as work:  # as extracted_shard's
        return curate_shard(shard, config, storage, toxicity, work)


def curated_config_hash(config: CuratedShardConfig, toxicity: ToxicityResource) -> str:
    """The config hash of a curated shard: its config with the toxicity model's settings inside `toxicity`, so
    that a shard scored by another model is stale too."""
    settings = config.model_dump()
    settings["toxicity"] = {**settings["toxicity"], **toxicity.settings()}
    return payload_hash(settings)


def curate_shard(shard: str, config: CuratedShardConfig, storage: StorageResource, toxicity: ToxicityResource,
                 work: Path) -> dg.MaterializeResult:
    store = storage.storage()
    extracted_key = stage_keys("extracted", shard)["documents"]
    try:
        classifier, classifier_info = current_classifier(store)
    except (OSError, ValueError) as exc:
        raise dg.Failure(description=f"cannot load the quality classifier: {exc}") from exc
    curation_config = config.curation_config(toxicity, classifier)
    histograms: dict[str, Histogram] = {}
    seen = StreamedDocuments(count=curated_counts)
    try:
        # A few thousand documents at a time, written as they come: the steps' working columns and the
        # text held stay those of one batch.
        batches = RowCount(store.iter_parquet(extracted_key, CURATION_BATCH_ROWS))
        run = CurationRun(curation_config, histograms)
        streamed = write_stream(seen.watch(run.kept_batches(batches)), work / "documents.parquet")
    except (RuntimeError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from exc
    received = batches.rows
    result = run.result(seen.first.head(0))
    examples = result.stats.get("classifier", {}).get("disagreement_examples", [])
    shown = set(drop_example_ids(result.dropped)) | {example["doc_id"] for example in examples}
    extracted = store.scan_parquet(extracted_key).filter(pl.col("doc_id").is_in(list(shown))).collect()
    record = {"policy": config.quality_policy, "classifier_hash": classifier.hash, "classifier_origin": classifier_info["origin"]}
    effective = json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(curation_config, classifier=None)), default=str))
    shares = language_shares(counted(seen.counts, LANG_COUNT))
    step_stats = result.stats
    timings = pl.DataFrame(
        [{"step": s, "docs_in": v["docs_in"], "docs_out": v["docs_out"], "seconds": v["seconds"]} for s, v in step_stats.items()]
    )
    pii_totals = step_stats.get("pii", {}).get("redacted", {})
    png = figure_png(histograms, f"curated_shard {shard}: {FIGURE_LEGEND}")
    return CURATED_STAGE.close(
        store, shard, received, result, streamed=streamed,
        facts={**seen.counts, "language_share_bounds": config.language_share_bounds},
        extra={"curation.json": json.dumps(record).encode(), "effective_config.json": json.dumps(effective, indent=1).encode(),
               HISTOGRAMS_PNG: png, HISTOGRAMS_JSON: json.dumps(to_json(histograms)).encode()},
        metadata={
            **drop_audit_metadata(
                result.dropped, extracted, [f"{RULES_STAGE}:{reason}" for reason in rule_reasons(curation_config.quality)]
            ),
            "quality_preset": config.quality_preset,
            "quality_policy": config.quality_policy,
            "classifier_hash": classifier.hash,
            "classifier": classifier_description(classifier_info),
            **disagreement_metadata(result.stats.get("classifier", {}), extracted),
            "steps": markdown_table(timings),
            "batches": seen.batches,
            "language_shares": dg.MetadataValue.json({k: round(v, 4) for k, v in shares.items()}),
            "langid_model": step_stats.get("langid", {}).get("model", "not run"),
            "toxicity_model": step_stats.get("toxicity", {}).get("model", "not run"),
            "toxicity_backend": step_stats.get("toxicity", {}).get("backend", "not run"),
            "zh_toxicity_lexicon": step_stats.get("toxicity", {}).get("zh_lexicon", "not run"),
            "pii_redacted": dg.MetadataValue.json(pii_totals),
            "text_length_histogram": length_histogram(seen.lengths()),
            **inline_histograms(histograms, result.dropped),
            **figure_metadata(png, store.uri(f"{stage_folder('curated', shard)}/{HISTOGRAMS_PNG}")),
            **document_previews(
                seen.first, ["doc_id", "url", "lang", "lang_score", "quality_score", "tox_max", "text"]
            ),
            "effective_config": dg.MetadataValue.json(without_word_lists(effective)),
            "effective_config_path": dg.MetadataValue.path(store.uri(effective_config_key(shard))),
            "config_hash": curated_config_hash(config, toxicity),
        },
    )


HISTOGRAMS_PNG, HISTOGRAMS_JSON = "quality_histograms.png", "quality_histograms.json"


def inline_histograms(histograms: dict[str, Histogram], dropped: pl.DataFrame) -> dict:
    """`hist/<signal>` (`histogram_panels`) and, where there is one, the legend they share."""
    panels = histogram_panels(histograms, dropped)
    entries = {name: dg.MetadataValue.md(markdown) for name, markdown in panels.items()}
    return {"hist_legend": dg.MetadataValue.text(INLINE_LEGEND), **entries} if entries else {}


def figure_metadata(png: bytes, uri: str) -> dict:
    """The whole figure, embedded (the UI shows it behind "Show Markdown"), and the path of its file."""
    return {"quality_histograms": dg.MetadataValue.md(figure_markdown(png)), "quality_histograms_png": dg.MetadataValue.path(uri)}


def without_word_lists(effective: dict) -> dict:
    """The effective config with each stop-word list shown as its size; the whole config is in its JSON file."""
    quality = effective["quality"]
    words = {lang: f"{len(listed)} words" for lang, listed in quality.get("stop_words", {}).items()}
    return effective | {"quality": quality | {"stop_words": words}}


class RowCount:
    """Batches passed through, counting their rows."""

    def __init__(self, batches):
        self.batches, self.rows = batches, 0

    def __iter__(self):
        for batch in self.batches:
            self.rows += batch.height
            yield batch


def disagreement_metadata(stats: dict, extracted: pl.DataFrame) -> dict:
    """Where the rules and the classifier disagree on this shard: counts, and examples to read."""
    if "disagreement_examples" not in stats:
        return {}
    examples = pl.DataFrame(
        stats["disagreement_examples"],
        schema={"doc_id": pl.String, "score": pl.Float64, "rules": pl.String, "classifier": pl.String},
    ).join(extracted.select("doc_id", "url", pl.col("text").str.slice(0, 160)), on="doc_id", how="left")
    return {
        # Every language's cut (the exact values are in the classifier's file), not only the others'.
        "classifier_threshold": dg.MetadataValue.text(", ".join(
            f"{language_name(lang)} {cut_text(cut)}" for lang, cut in stats["thresholds"].items())),
        # Documents with HTML are scored by the stacker that reads the page's signals, documents read from text
        # (JSON Lines, Parquet, WET) by the text model, which was trained without them.
        "classifier_models": dg.MetadataValue.json(stats.get("scored_by", {})),
        # The cut each language, page kind and model in this shard was decided at (`zh (text)`: the text model's).
        "classifier_cuts_applied": dg.MetadataValue.json(stats.get("cuts_applied", {})),
        "rules_drop_classifier_keeps": stats["rules_drop_classifier_keeps"],
        "classifier_drops_rules_keep": stats["classifier_drops_rules_keep"],
        "disagreements": dg.MetadataValue.md(disagreement_list(examples)),
    }


def disagreement_list(examples: pl.DataFrame) -> str:
    """Each disagreement as a list item: the two verdicts and P(KEEP), the URL, then the page's opening
    quoted under it, so that the text wraps in the cell (a table's text column runs off it)."""
    if examples.height == 0:
        return "_none_"
    items = []
    for row in examples.iter_rows(named=True):
        opening = " ".join((row["text"] or "").split())
        items.append(f"- rules **{row['rules']}**, classifier **{row['classifier']}** (P(KEEP) {significant(row['score'])}): "
                     f"{row['url']}\n  > {opening}…")  # fmt: skip
    return "\n".join(items)


CURATION_SUMMARY_FOLDER = "curation_summary"


@dg.asset(
    group_name="curation",
    deps=[curated_shard],
    kinds={"polars", "matplotlib"},
    description="The quality dashboard over every curated shard: each quality signal's histogram of kept and "
    "dropped documents with its thresholds, language ID's and the classifier's too, summed over the shards, "
    "and the drops by rule.",
)
def curation_summary(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.storage()
    shards = [shard for shard in context.instance.get_dynamic_partitions(shard_partitions.name)
              if store.exists(f"{stage_folder('curated', shard)}/{HISTOGRAMS_JSON}")]  # fmt: skip
    if not shards:
        raise dg.Failure("no curated shard has histograms yet: materialize curated_shard first")
    total, left_out = summed([from_json(json.loads(store.read_bytes(f"{stage_folder('curated', shard)}/{HISTOGRAMS_JSON}")))
                              for shard in shards])  # fmt: skip
    dropped = pl.concat([store.read_parquet(stage_keys("curated", shard)["dropped"], columns=["stage", "reason"])
                         for shard in shards])  # fmt: skip
    png = figure_png(total, f"{len(shards)} curated shards: {FIGURE_LEGEND}")
    key = f"{CURATION_SUMMARY_FOLDER}/{HISTOGRAMS_PNG}"
    store.write_bytes(key, png)
    store.write_bytes(f"{CURATION_SUMMARY_FOLDER}/{HISTOGRAMS_JSON}", json.dumps(to_json(total)).encode())
    return dg.MaterializeResult(metadata={
        "shards": len(shards),
        "documents": sum(sum(h.kept) + sum(h.dropped) for h in total.values() if h.signal == LANG_SCORE),
        **({"histograms_left_out": dg.MetadataValue.text(f"{left_out} shard histograms binned under other thresholds")}
           if left_out else {}),  # fmt: skip
        **drop_metadata(dropped),
        **inline_histograms(total, dropped),
        **figure_metadata(png, store.uri(key)),
    })


@dg.asset_check(
    asset=curated_shard,
    description="Every curated shard was scored by the current quality classifier; the ones that were not are "
    "stale and listed, and the nightly refresh re-runs them.",
)
def curated_with_current_classifier(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    store = storage.storage()
    shards = context.instance.get_dynamic_partitions(shard_partitions.name)
    stale = classifier_stale_shards(store, shards)
    current = current_classifier_hash(store)
    return dg.AssetCheckResult(
        passed=not stale,
        metadata={"current_classifier_hash": current, "shards": len(shards), "stale": dg.MetadataValue.json(stale)},
    )
