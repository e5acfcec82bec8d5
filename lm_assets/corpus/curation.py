"""The curation pipeline: language ID, quality rules, toxicity and PII redaction, in a configurable order."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import polars as pl

from lm_assets.corpus.langid import LangIdConfig, identify_languages
from lm_assets.corpus.pii import redact_frame
from lm_assets.corpus.quality import QualityConfig, apply_quality_rules, preset
from lm_assets.corpus.stage import DROPPED_SCHEMA, StageResult
from lm_assets.corpus.toxicity import ToxicityConfig, score_toxicity

STEPS = ("langid", "quality", "toxicity", "pii")


@dataclass
class CurationConfig:
    order: tuple[str, ...] = STEPS
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    quality: QualityConfig = field(default_factory=preset)
    toxicity: ToxicityConfig = field(default_factory=ToxicityConfig)


def run_step(name: str, docs: pl.DataFrame, config: CurationConfig) -> StageResult:
    if name == "langid":
        return identify_languages(docs, config.langid)
    if name == "quality":
        return apply_quality_rules(docs, config.quality)
    if name == "toxicity":
        return score_toxicity(docs, config.toxicity)
    if name == "pii":
        return redact_frame(docs, column="text")
    raise ValueError(f"unknown curation step {name!r}; choose from {STEPS}")


def curate(docs: pl.DataFrame, config: CurationConfig | None = None) -> StageResult:
    """Run the steps in `config.order`. Stats hold, per step, docs in/out, seconds and its own stats."""
    config = config or CurationConfig()
    unknown = set(config.order) - set(STEPS)
    if unknown:
        raise ValueError(f"unknown curation steps {sorted(unknown)}; choose from {STEPS}")
    if "quality" in config.order and "langid" in config.order and config.order.index("quality") < config.order.index("langid"):
        raise ValueError("the quality rules need the `lang` column: run langid before quality")
    dropped, stats = [], {}
    for name in config.order:
        started = time.perf_counter()
        result = run_step(name, docs, config)
        stats[name] = {
            "docs_in": docs.height,
            "docs_out": result.kept.height,
            "seconds": round(time.perf_counter() - started, 3),
            **result.stats,
        }
        dropped.append(result.dropped)
        docs = result.kept
    all_dropped = pl.concat(dropped) if dropped else pl.DataFrame(schema=DROPPED_SCHEMA)
    return StageResult(kept=docs, dropped=all_dropped, stats=stats)
