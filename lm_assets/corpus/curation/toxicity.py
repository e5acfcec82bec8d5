"""Toxicity scoring, line by line, with a backend chosen by name or by the device.

- `auto` (the default): `detoxify` where torch sees a CUDA device, `profanity_check` on a CPU, where
  Detoxify would take nearly all of curation's time even behind the pre-screen (`bench/toxicity_speed.py`).
  Stats name the backend that ran and why.
- `detoxify`: Unitary's Detoxify BERT models. Its release checkpoint is downloaded from GitHub
  unless `checkpoint` points at a local file in the same format (with `hf_config_path` holding the
  model's config.json and tokenizer files for offline use).
- `profanity_check`: alt-profanity-check, a linear model trained on English toxic comments that
  ships inside its wheel, so it works offline.

Both models read English. Detoxify scores only the lines a pre-screen finds suspicious: alt-profanity-check
scores every line first (about 10 MB of text per CPU-second), and a line below `prescreen_threshold`
(0.05; toxic lines score 0.5-1.0 there, 88 % of real-web lines below 0.05) counts as clean without the
BERT model, which reads the rest sorted by length in batches. A line mostly in CJK characters is not
theirs to read: they would judge it by its few Latin words alone ("Hater", an app's name, in a Chinese
article about it), so it counts as clean for them. Stats say how many lines each model scored.
Documents in Chinese (`lang` zh) are scored as well by the share of their words that a Chinese lexicon
flags (`chinese_lexicon.py`), whichever backend runs.

A model that cannot be loaded raises ToxicityModelError; nothing falls back to another backend.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from importlib import metadata

import polars as pl

from lm_assets.corpus.stage import StageResult, split_by_reason
from lm_assets.text import CJK

STAGE = "toxicity"  # the `stage` of its drops
BACKENDS = ("auto", "detoxify", "profanity_check")


class ToxicityModelError(RuntimeError):
    pass


# Detoxify's release models (detoxify.detoxify.MODEL_URLS).
DETOXIFY_MODELS = ("original", "unbiased", "multilingual", "original-small", "unbiased-small")


@dataclass(frozen=True)
class ToxicityConfig:
    backend: str = "auto"  # one of BACKENDS
    detoxify_model_type: str = "original"  # one of DETOXIFY_MODELS
    detoxify_checkpoint: str | None = None
    detoxify_hf_config_path: str | None = None
    device: str = "auto"  # cuda when torch sees a GPU, else cpu
    line_threshold: float = 0.8
    # Detoxify only: lines alt-profanity-check scores below this count as clean unscored; None: every line.
    prescreen_threshold: float | None = 0.05
    max_toxic_fraction: float = 0.2
    batch_size: int = 64
    # Chinese documents: flagged words over words at or above this drop the document (Data-Juicer's
    # flagged-word filter's default ratio); None: not scored.
    zh_max_flagged_ratio: float | None = 0.045


class DetoxifyScorer:
    def __init__(self, config: ToxicityConfig):
        try:
            from detoxify import Detoxify
        except ImportError as exc:
            raise ToxicityModelError(f"toxicity backend 'detoxify' is not installed: {exc}") from exc
        if config.detoxify_checkpoint and not os.path.exists(config.detoxify_checkpoint):
            raise ToxicityModelError(f"detoxify checkpoint not found: {config.detoxify_checkpoint}")
        try:
            self.device = resolve_device(config.device)
            self.model = Detoxify(
                model_type=config.detoxify_model_type,
                checkpoint=config.detoxify_checkpoint,
                device=self.device,
                huggingface_config_path=config.detoxify_hf_config_path,
            )
        except Exception as exc:  # noqa: BLE001 - download, unpickling and HF errors all end here
            source = config.detoxify_checkpoint or f"the '{config.detoxify_model_type}' release checkpoint"
            raise ToxicityModelError(
                f"could not load detoxify from {source}: {type(exc).__name__}: {exc}. Offline, set "
                "detoxify_checkpoint to a local .ckpt and detoxify_hf_config_path to its config and "
                "tokenizer folder, or choose backend 'profanity_check'."
            ) from exc
        self.batch_size = config.batch_size
        origin = config.detoxify_checkpoint or f"release:{config.detoxify_model_type}"
        self.name = f"detoxify {metadata.version('detoxify')} ({origin}, {type(self.model.model).__name__}, {self.device})"

    def score(self, lines: list[str]) -> list[float]:
        """Scores in the order given; batches are of lines of similar length, so little is padding."""
        order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
        out = [0.0] * len(lines)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            scores = self.model.predict([lines[i] for i in chunk])["toxicity"]
            for i, score in zip(chunk, scores if isinstance(scores, list) else [scores], strict=True):
                out[i] = float(score)
        return out


class ProfanityCheckScorer:
    """alt-profanity-check's own TF-IDF vectorizer and calibrated linear SVM, with the vectorizer's tokens
    cut by polars over a run of lines instead of by sklearn line by line: twice the speed from about
    5,000 lines on, a millisecond or two slower on a handful. The scores are the package's `predict_prob`,
    bit for bit (`tests/corpus/curation/test_toxicity.py`)."""

    def __init__(self, config: ToxicityConfig):
        try:
            from profanity_check import profanity_check
        except Exception as exc:  # noqa: BLE001 - sklearn version mismatches surface as many types
            raise ToxicityModelError(f"could not load alt-profanity-check: {type(exc).__name__}: {exc}") from exc
        self.vectorizer, self.model = profanity_check.vectorizer, profanity_check.model
        vocabulary = self.vectorizer.vocabulary_
        self.vocabulary = pl.DataFrame(
            {"token": list(vocabulary), "column": list(vocabulary.values())},
            schema={"token": pl.String, "column": pl.UInt32},
        )
        self.name = f"alt-profanity-check {metadata.version('alt-profanity-check')} (bundled sklearn model)"
        self.unassigned = unassigned_characters()  # a scan of the Unicode tables: once, with the model

    # Lines scored at once: their tokens, one row each, stay a few tens of MB.
    CHUNK_LINES = 16_384

    def score(self, lines: list[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(lines), self.CHUNK_LINES):
            scores += self._score(lines[start : start + self.CHUNK_LINES])
        return scores

    def _score(self, lines: list[str]) -> list[float]:
        import numpy as np
        from scipy import sparse

        lowered = pl.Series("line", [line.lower() for line in lines], dtype=pl.String)
        # sklearn cuts tokens with Python's `re` and its Unicode tables: where a line holds a character
        # those tables do not know, polars' newer ones could cut differently, so sklearn cuts that line.
        unknown = np.zeros(len(lines), dtype=bool)
        wide = np.flatnonzero([not line.isascii() for line in lines])
        if wide.size:  # an ASCII line holds no unassigned character
            unknown[wide] = lowered.gather(wide).str.contains(self.unassigned).to_numpy()
        counts = (
            pl.DataFrame({"token": lowered.str.extract_all(WORD_TOKEN)})
            .with_row_index("row")
            .filter(pl.Series(~unknown))
            .explode("token")
            .join(self.vocabulary, on="token")
            .group_by("row", "column")
            .len()
        )
        rows, columns = counts["row"].to_numpy(), counts["column"].to_numpy()
        values = counts["len"].to_numpy().astype(np.float64)
        if unknown.any():
            analyze, vocabulary = self.vectorizer.build_analyzer(), self.vectorizer.vocabulary_
            extra = [(i, vocabulary[t]) for i in np.flatnonzero(unknown) for t in analyze(lines[i]) if t in vocabulary]
            rows = np.concatenate([rows, np.array([i for i, _ in extra], dtype=rows.dtype)])
            columns = np.concatenate([columns, np.array([c for _, c in extra], dtype=columns.dtype)])
            values = np.concatenate([values, np.ones(len(extra))])
        matrix = sparse.csr_matrix((values, (rows, columns)), shape=(len(lines), self.vocabulary.height))
        matrix.sum_duplicates()
        matrix.sort_indices()
        tfidf = self.vectorizer._tfidf.transform(matrix, copy=False)
        return self.model.predict_proba(tfidf)[:, 1].tolist()


# The vectorizer's token pattern, `(?u)\b\w\w+\b`: maximal runs of two or more word characters, which for
# Python's `re` are the letters, the numbers and "_".
WORD_TOKEN = r"[\p{L}\p{N}_]{2,}"


@functools.lru_cache(maxsize=1)
def unassigned_characters() -> str:
    """A regex class of the code points this Python's Unicode database leaves unassigned."""
    import unicodedata

    ranges, start = [], None
    for code in range(0x110000):
        unassigned = unicodedata.category(chr(code)) == "Cn"
        if unassigned and start is None:
            start = code
        elif not unassigned and start is not None:
            ranges.append((start, code - 1))
            start = None
    if start is not None:
        ranges.append((start, 0x10FFFF))
    return "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges) + "]"


def chosen_backend(config: ToxicityConfig) -> tuple[ToxicityConfig, str]:
    """`config` with the backend that runs, and why it is that one."""
    if config.backend != "auto":
        return config, "set in the config"
    device = resolve_device(config.device)
    if device.startswith("cuda"):
        return replace(config, backend="detoxify"), f"auto: a CUDA device ({device}) runs Detoxify"
    return replace(config, backend="profanity_check"), (
        f"auto: no CUDA device (device {config.device} is {device}), and Detoxify on a CPU takes nearly all of "
        "curation's time; set backend detoxify to run it anyway")


@functools.lru_cache(maxsize=4)
def load_scorer(config: ToxicityConfig):
    config, _ = chosen_backend(config)
    if config.backend == "detoxify":
        return DetoxifyScorer(config)
    if config.backend == "profanity_check":
        return ProfanityCheckScorer(config)
    raise ToxicityModelError(f"unknown toxicity backend {config.backend!r}; choose one of {BACKENDS}")


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def line_scores(flat: list[str], config: ToxicityConfig) -> tuple[list[float], dict]:
    """Each line's score, and which model scored how many lines: with the pre-screen, the backend's model
    scores only the lines the screen does not clear; the cleared ones score 0."""
    config, _ = chosen_backend(config)
    scorer = load_scorer(config)
    counts = {"lines": len(flat)}
    if config.backend != "detoxify" or config.prescreen_threshold is None:
        return scorer.score(flat), counts | {"lines_scored_by_model": len(flat), "prescreen": "none"}
    screen = load_scorer(ToxicityConfig(backend="profanity_check"))
    suspicious = [i for i, score in enumerate(screen.score(flat)) if score >= config.prescreen_threshold]
    scores = [0.0] * len(flat)
    for i, score in zip(suspicious, scorer.score([flat[i] for i in suspicious]), strict=True):
        scores[i] = score
    prescreen = f"{screen.name}, below {config.prescreen_threshold:g} cleared"
    return scores, counts | {"lines_scored_by_model": len(suspicious), "prescreen": prescreen}


def mostly_cjk(lines: list[str]) -> list[bool]:
    """Whether more than half of each line's letters are CJK characters (an ASCII line has none, and is not
    searched)."""
    out = [False] * len(lines)
    wide = [i for i, line in enumerate(lines) if not line.isascii()]
    if wide:
        column = pl.Series([lines[i] for i in wide], dtype=pl.String)
        cjk = (2 * column.str.count_matches(f"[{CJK}]") > column.str.count_matches(r"\p{L}")).to_list()
        for i, value in zip(wide, cjk, strict=True):
            out[i] = value
    return out


def score_documents(texts: list[str], config: ToxicityConfig) -> tuple[list[float], list[float], str, dict]:
    """Per document: the highest line score, and the share of characters in toxic lines; the model's name,
    and how many lines each model scored (the English models read no line mostly in CJK characters)."""
    scorer = load_scorer(config)
    doc_lines = [[ln for ln in text.split("\n") if ln.strip()] for text in texts]
    flat = [ln for lines in doc_lines for ln in lines]
    cjk = mostly_cjk(flat)
    read = [ln for ln, skip in zip(flat, cjk) if not skip]
    read_scores, counts = line_scores(read, config)
    counts |= {"lines": len(flat), "lines_mostly_cjk_unscored": len(flat) - len(read)}
    read_iter = iter(read_scores)
    scores = [0.0 if skip else next(read_iter) for skip in cjk]
    flat_scores = iter(scores)
    maxima, fractions = [], []
    for lines in doc_lines:
        total = toxic = 0
        top = 0.0
        for line in lines:
            s = next(flat_scores)
            top = max(top, s)
            total += len(line)
            toxic += len(line) if s >= config.line_threshold else 0
        maxima.append(top)
        fractions.append(toxic / total if total else 0.0)
    return maxima, fractions, scorer.name, counts


def score_toxicity(docs: pl.DataFrame, config: ToxicityConfig | None = None) -> StageResult:
    config, why = chosen_backend(config or ToxicityConfig())
    maxima, fractions, model_name, counts = score_documents(docs["text"].to_list(), config)
    scored = docs.with_columns(
        pl.Series("tox_max", maxima, dtype=pl.Float64), pl.Series("tox_frac", fractions, dtype=pl.Float64)
    )
    flagged, lexicon_name = zh_flagged(scored, config)
    scored = scored.with_columns(pl.Series("tox_zh_flagged", flagged, dtype=pl.Float64))
    zh_limit = config.zh_max_flagged_ratio if config.zh_max_flagged_ratio is not None else float("inf")
    result = split_by_reason(
        scored,
        pl.when(pl.col("tox_frac") >= config.max_toxic_fraction).then(pl.lit("toxicity:toxic_fraction"))
        .when(pl.col("tox_zh_flagged") >= zh_limit).then(pl.lit("toxicity:zh_flagged_words")),
        stage=STAGE,
        score=pl.when(pl.col("tox_frac") >= config.max_toxic_fraction).then("tox_frac").otherwise("tox_zh_flagged"),
    )
    result.stats = {
        "model": model_name,
        "backend": f"{config.backend} ({why})",
        **counts,
        "docs_with_toxic_lines": int(sum(f > 0 for f in fractions)),
        "zh_lexicon": lexicon_name,
        "zh_docs_scored": sum(value is not None for value in flagged),
        "zh_docs_with_flagged_words": sum(bool(value) for value in flagged),
    }
    return result


def zh_flagged(docs: pl.DataFrame, config: ToxicityConfig) -> tuple[list[float | None], str]:
    """The flagged-word ratio of each Chinese document (None for the others), and the lexicon that scored."""
    if config.zh_max_flagged_ratio is None or "lang" not in docs.columns:
        return [None] * docs.height, "not run"
    from lm_assets.corpus.curation.chinese_lexicon import flagged_ratios, lexicon
    from lm_assets.text import base_lang

    langs = [base_lang(lang) for lang in docs["lang"].to_list()]
    rows = [i for i, lang in enumerate(langs) if lang == "zh"]
    texts = docs["text"].to_list()
    ratios = flagged_ratios([texts[i] for i in rows]) if rows else []
    out: list[float | None] = [None] * docs.height
    for i, ratio in zip(rows, ratios):
        out[i] = ratio
    return out, lexicon().name
