"""A small, fast quality classifier trained on labelled pages (the FineWeb-Edu / DCLM recipe).

fastText reads the normalized text (lower case, white space collapsed, punctuation and every CJK
character split into tokens, so `wordNgrams=2` gives Chinese its character bigrams) and gives
P(KEEP). With `features="text+signals"` that probability, as a logit, is stacked with the `q_*` rule
signals of `curation/rules.py` by small gradient-boosted trees (or a logistic regression); the fastText
probability the stacker learns from is cross-fitted on the training split with each source whole in
one fold, so the stacker learns how far fastText carries to sources it never saw, which is what a new
crawl is made of. bench/quality_classifier.py and bench/quality_transfer.py measured these choices.

A page's source is the collection it was labelled in (`collection`: a Debian package, a repository of
saved pages, the blogs; a user's labels are one), else its site. Pages of one collection share their
layout, era and labeller, so figures cross-validated by site flatter a model: only source-out
figures say what a crawl nobody labelled will get.

The model's scores are calibrated per language (Platt scaling) on its source-out scores, so that a
score means the same share of good pages whatever source it comes from; each language's threshold
maximizes balanced accuracy over those calibrated source-out scores. The artefact keeps the
quantiles of the good pages' source-out scores per language, so that a decision can be asked for as
a target (keep at least this share of good pages) instead of a score. The figures in `metrics` come
from a held-back split, stratified by (lang, keep), and from the cross-validations by source and by
site side by side. The artefact is a zip
with fixed timestamps holding `classifier.json` (normalization, threshold, stacker weights) and the
fastText model; loading it parses JSON and reads fastText's binary format, never a pickle.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import io
import json
import math
import os
import re
import struct
import tempfile
import zipfile
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import polars as pl

from lm_assets.corpus.curation.rules import PAGE_SIGNAL_PREFIXES, preset, rule_signals, signal_names
from lm_assets.corpus.quality.fasttext_training import train_fasttext_model
from lm_assets.corpus.quality.token_signals import SIGNALS as TOKEN_SIGNALS
from lm_assets.corpus.quality.token_signals import token_signal_matrix
from lm_assets.text import CJK_PUNCTUATION_RANGES, CJK_RANGES, base_lang, char_class

FEATURES = ("text", "text+signals")
STACKERS = ("logistic", "boosting")
FORMAT = "lm_assets.quality_classifier"
# 2: fastText reads tokens as their CRC-32 (so that training pages can ship without their text), and
# thresholds are per language. 3: scores calibrated per language, good pages' score quantiles.
FORMAT_VERSION = 4
# A version 2 artefact's scores are read as they are (no calibration); versions 2 and 3 have one model and no
# token signals.
READABLE_VERSIONS = (2, 3, 4)
FOLD_GROUPS = ("source", "site", "page")
QUANTILES = 101  # of the good pages' source-out scores per language: 0 %, 1 %, ..., 100 %
RELIABILITY_BINS = 10
ANY_LANGUAGE = "*"
KEEP_LABEL, DROP_LABEL = "__label__keep", "__label__drop"
FASTTEXT_ENTRY, MANIFEST_ENTRY = "fasttext.bin", "classifier.json"
MAX_ENTRY_BYTES = 64 << 20
# fastText's binary format begins with this magic number and version (fastText 0.9.x).
FASTTEXT_MAGIC, FASTTEXT_VERSION = 793712314, 12
ZIP_TIME = (1980, 1, 1, 0, 0, 0)

_CJK_CLASS = char_class(CJK_RANGES + CJK_PUNCTUATION_RANGES)
# A token: one CJK character, one other character that is neither a word character nor white space, or a
# run of the remaining word characters. One C-level pass, where spacing out each such character with a
# substitution template and splitting cost three times as much.
_TOKEN = re.compile(f"(?!\\s)[{_CJK_CLASS}]|[^\\w\\s]|(?:(?![{_CJK_CLASS}])\\w)+")


@dataclass(frozen=True)
class ClassifierConfig:
    seed: int = 0
    test_fraction: float = 0.3  # held-back split, stratified by (lang, keep); 0: out-of-fold figures instead
    features: str = "text+signals"  # or "text": fastText alone
    folds: int = 5  # cross-fitting, calibration and threshold choice on the training split
    folds_by: str = "source"  # each source's (or site's) pages whole in one fold (`group_fold_ids`), or "page"
    calibrate: bool = True  # Platt scaling per language on the out-of-fold scores (`fit_calibration`)
    min_per_class: int = 5  # KEEP and DROP examples the training split needs at least
    max_chars: int = 3000  # text read per document
    # fastText
    dim: int = 16
    epoch: int = 25
    lr: float = 0.5
    word_ngrams: int = 2
    min_count: int = 1
    bucket: int = 10_000
    quantize: bool = False
    balance_classes: bool = True  # repeat the rarer class's lines so both weigh the same in fastText
    # the stacker on the fastText logit and the q_* signals: gradient "boosting" or "logistic" regression
    stacker: str = "boosting"
    stacker_c: float = 1.0  # the logistic regression's C
    # A threshold per language with enough pages of both labels in the training split (out-of-fold; fewer
    # make a cut that follows a handful of pages), the pooled one for the others.
    thresholds_by_language: bool = True
    language_threshold_min_per_class: int = 20
    # The cut of highest balanced accuracy among those that keep at least this share of the KEEP pages
    # out-of-fold (where one does). 94 % made cuts too lenient for every crawl labelled outside the project
    # (junk rejection 0.64-0.67 on the web and manuals, 0.15 on extracted text); with cuts by page kind, 90 %
    # gains 0.02-0.04 on the English manuals and the text path (docs/architecture.md). None: the cut of highest
    # balanced accuracy.
    min_keep_retention: float | None = 0.9
    # The spam and listing signals of the tokens (`token_signals.py`) stacked with the others; () for none. Each
    # was kept only where it raised the text path source-out without lowering the HTML path
    # (docs/architecture.md): the list separators, read by the text model alone.
    token_signals: tuple[str, ...] = ("q_tok_separators",)
    # A second stacker for documents without HTML (a JSONL, Parquet or WET shard): trained on every page
    # without the signals only HTML gives, its own calibration, thresholds and quantiles. The HTML stacker
    # then trains on the pages that have HTML. Needs both labels among the pages with HTML.
    text_model: bool = True
    text_model_without: tuple[str, ...] = ("q_html_", "q_title_")
    # Signals the HTML stacker does without (name prefixes): the page signals already tell it a keyword list.
    html_model_without: tuple[str, ...] = ("q_tok_",)
    # A page with HTML whose link share (`q_html_link_share`) is below this looks like an article: junk among
    # such pages scores higher than junk among link-heavy pages, so each kind gets a cut of its own per
    # language (where it has `language_threshold_min_per_class` pages of each label), the two chosen together
    # under the language's retention floor (`kind_thresholds`). None: one cut a language.
    cut_by_link_share: float | None = 0.3


@dataclass
class TrainedClassifier:
    model: bytes
    metrics: dict
    hash: str


def tokens(text: str | None, max_chars: int) -> list[str]:
    """The text's first `max_chars` characters, lower-cased, as they are cut into tokens, in training and
    scoring alike: each CJK character and each punctuation mark on its own, words whole."""
    return _TOKEN.findall((text or "")[:max_chars].lower())


def normalize_text(text: str | None, max_chars: int) -> str:
    return " ".join(tokens(text, max_chars))


def token_ids(text: str | None, max_chars: int) -> list[int]:
    """The normalized text's tokens as their CRC-32: what fastText reads. A page is kept in this form
    among the shipped training pages, without its text."""
    return [zlib.crc32(token.encode()) for token in tokens(text, max_chars)]


def token_line(ids) -> str:
    return " ".join(f"{token:08x}" for token in ids)


# Token -> its id as fastText reads it. Words repeat across pages: a lookup costs a fifth of hashing anew.
_TOKEN_WORDS: dict[str, str] = {}


def text_token_line(text: str | None, max_chars: int) -> str:
    """`token_line(token_ids(text, max_chars))`, from a cache of each token's id."""
    words = _TOKEN_WORDS
    if len(words) > 1_000_000:
        words.clear()
    line = []
    for token in tokens(text, max_chars):
        word = words.get(token)
        if word is None:
            word = words[token] = f"{zlib.crc32(token.encode()):08x}"
        line.append(word)
    return " ".join(line)


def model_hash(model: bytes) -> str:
    return hashlib.sha256(model).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# fastText
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def fasttext_package() -> dict:
    """The distribution whose files are the `fasttext` module in use: several wheels install that module."""
    import fasttext

    module_dir = Path(fasttext.__file__).resolve().parent
    for info in sorted(module_dir.parent.glob("fasttext*.dist-info")):
        dist = importlib.metadata.Distribution.at(info)
        for record in dist.files or []:
            if record.hash is None or record.name != "__init__.py" or record.parent.name != "fasttext":
                continue
            path = Path(dist.locate_file(record)).resolve()
            if path.parent == module_dir and _record_digest(path) == record.hash.value:
                return {"package": dist.metadata["Name"], "version": dist.version}
    return {"package": "unknown", "version": getattr(fasttext, "__version__", "unknown")}


def _record_digest(path: Path) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def train_fasttext(lines: list[str], config: ClassifierConfig, zeroed: bool = True) -> bytes:
    """fastText's model bytes for `lines`, trained in a child process (`fasttext_training`)."""
    import fasttext

    if not hasattr(fasttext, "train_supervised"):
        raise RuntimeError(
            "the installed `fasttext` module cannot train (it is fasttext-predict's, inference only); "
            "reinstall the training wheel pinned in pyproject.toml: "
            "`pip install --force-reinstall --no-deps fasttext-numpy2-wheel==0.9.2`"
        )
    params = {
        "dim": config.dim, "epoch": config.epoch, "lr": config.lr, "wordNgrams": config.word_ngrams,
        "minCount": config.min_count, "bucket": config.bucket, "thread": 1, "seed": config.seed, "verbose": 0,
        "loss": "softmax",
    }
    return train_fasttext_model(lines, params, config.quantize, zeroed)


def _load_fasttext(data: bytes):
    import fasttext

    if len(data) < 8 or struct.unpack("<ii", data[:8]) != (FASTTEXT_MAGIC, FASTTEXT_VERSION):
        raise ValueError("not a quality classifier: its fastText entry is not a fastText 0.9 model")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.bin")
        Path(path).write_bytes(data)
        model = fasttext.load_model(path)
    labels = sorted(label for _, label in model.f.predict("\n", 3, 0.0, "replace"))
    if labels != [DROP_LABEL, KEEP_LABEL]:
        raise ValueError(f"not a quality classifier: fastText labels {labels}")
    return model


def _keep_probability(model, texts: list[str]) -> np.ndarray:
    """P(KEEP) per normalized text. The binding's own `predict` is called: the Python wrappers of the
    wheels that install a `fasttext` module differ (some break on numpy 2), the binding does not."""
    keep = np.zeros(len(texts))
    for i, text in enumerate(texts):
        probs = {label: prob for prob, label in model.f.predict(text + "\n", 2, 0.0, "replace")}
        total = probs.get(KEEP_LABEL, 0.0) + probs.get(DROP_LABEL, 0.0)
        keep[i] = probs.get(KEEP_LABEL, 0.0) / total if total > 0 else 0.5
    return keep


def fasttext_lines(texts: list[str], keep: np.ndarray, weight: np.ndarray, balance: bool) -> list[str]:
    repeats = np.clip(np.rint(weight / weight.min()), 1, 10).astype(int)
    if balance:
        n_keep, n_drop = repeats[keep].sum(), repeats[~keep].sum()
        rarer = ~keep if n_drop < n_keep else keep
        repeats[rarer] *= max(1, round(max(n_keep, n_drop) / max(1, min(n_keep, n_drop))))
    lines = []
    for text, is_keep, n in zip(texts, keep, repeats):
        lines.extend([f"{KEEP_LABEL if is_keep else DROP_LABEL} {text}"] * int(n))
    return lines


# ---------------------------------------------------------------------------------------------
# Rule signals and the stacker
# ---------------------------------------------------------------------------------------------


def signal_frame(docs: pl.DataFrame, names: list[str] | None = None) -> pl.DataFrame:
    """The `q_*` columns `names`, reused from `docs` when it holds them all, else the rule signals computed
    with `rule_signals(..., preset())` and extraction's page signals taken from `docs`. With `names`
    None: every rule signal of the default preset, and the page signals `docs` holds."""
    if names is not None and all(name in docs.columns for name in names):
        return docs.select(names)
    page = [name for name in docs.columns if name.startswith(PAGE_SIGNAL_PREFIXES)] if names is None else [
        name for name in names if name.startswith(PAGE_SIGNAL_PREFIXES)
    ]
    missing_page = [name for name in page if name not in docs.columns]
    if missing_page:
        raise ValueError(
            f"this classifier reads the page signals {missing_page}, which extraction records: the documents lack "
            "them (extracted before the signals existed, or not from HTML); re-materialize extracted_shard"
        )
    signals = rule_signals(docs["text"].to_list(), docs["lang"].to_list(), preset())
    rules = [name for name in names if name not in page] if names is not None else sorted(signals.columns)
    missing = [name for name in rules if name not in signals.columns]
    if missing:
        raise ValueError(f"the quality rules no longer compute {missing}, which this classifier reads")
    return pl.concat([signals.select(rules), docs.select(sorted(page))], how="horizontal").select(
        names if names is not None else rules + sorted(page)
    )


def _elementwise(function, values: np.ndarray) -> np.ndarray:
    """`function` (one of `math`'s) of each value. numpy's own log and exp take another code path on a CPU
    with AVX-512 and differ in the last bit, which moved the stacker's bins and the shipped classifier's
    hash; the C library's give the same bits with AVX-512 as without."""
    flat = np.fromiter(map(function, values.ravel().tolist()), dtype=np.float64, count=values.size)
    return flat.reshape(values.shape)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + _elementwise(math.exp, np.clip(-z, -700.0, 700.0)))  # math.exp overflows past 709


# A document read from text, not HTML (a JSONL or text shard), has no page signals: it is scored as what it is, a
# page that is all text, with no markup, no links and nothing removed. Its text ratio read as 0 would make it a
# page of markup alone, below every labelled page (0.003 at least), and its prose was cut as junk.
TEXT_ONLY_SIGNALS = {"q_html_text_ratio": 1.0}


def _signal_matrix(signals: pl.DataFrame, log_columns: list[str]) -> np.ndarray:
    columns = []
    for name in signals.columns:
        values = signals[name].cast(pl.Float64).fill_null(TEXT_ONLY_SIGNALS.get(name, 0.0)).fill_nan(0.0).to_numpy()
        columns.append(_elementwise(math.log1p, np.maximum(values, 0.0)) if name in log_columns else values)
    return np.column_stack(columns) if columns else np.zeros((signals.height, 0))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return _elementwise(math.log, p / (1 - p))


def _fit_stacker(x: np.ndarray, keep: np.ndarray, weight: np.ndarray, config: ClassifierConfig) -> dict:
    if config.stacker == "boosting":
        return _fit_boosting(x, keep, weight, config)
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=config.stacker_c, class_weight="balanced", max_iter=2000, random_state=config.seed)
    model.fit((x - mean) / scale, keep, sample_weight=weight)
    return {"kind": "logistic", "mean": mean.tolist(), "scale": scale.tolist(), "coef": model.coef_[0].tolist(),
            "intercept": float(model.intercept_[0])}


def _fit_boosting(x: np.ndarray, keep: np.ndarray, weight: np.ndarray, config: ClassifierConfig) -> dict:
    """Small histogram gradient boosting, its trees written out as plain arrays."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(
        max_iter=100, learning_rate=0.1, max_leaf_nodes=8, min_samples_leaf=10, l2_regularization=1.0,
        class_weight="balanced", early_stopping=False, random_state=config.seed,
    )
    model.fit(x, keep, sample_weight=weight)
    trees = []
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        trees.append({"feature": nodes["feature_idx"].tolist(), "threshold": nodes["num_threshold"].tolist(),
                      "left": nodes["left"].tolist(), "right": nodes["right"].tolist(),
                      "value": nodes["value"].tolist(), "leaf": nodes["is_leaf"].astype(bool).tolist()})
    stacker = {"kind": "boosting", "baseline": float(np.ravel(model._baseline_prediction)[0]), "trees": trees}
    if not np.allclose(_apply_stacker(stacker, x), model.predict_proba(x)[:, 1]):
        raise RuntimeError("the boosting stacker written out does not predict as scikit-learn's model")
    return stacker


def _apply_stacker(stacker: dict, x: np.ndarray) -> np.ndarray:
    if stacker["kind"] == "logistic":
        z = ((x - np.asarray(stacker["mean"])) / np.asarray(stacker["scale"])) @ np.asarray(stacker["coef"])
        return _sigmoid(z + stacker["intercept"])
    raw = np.full(len(x), stacker["baseline"])
    for tree in stacker["trees"]:
        feature, threshold = np.asarray(tree["feature"]), np.asarray(tree["threshold"])
        left, right, leaf = np.asarray(tree["left"]), np.asarray(tree["right"]), np.asarray(tree["leaf"])
        node = np.zeros(len(x), dtype=np.int64)
        rows = np.flatnonzero(~leaf[node])
        while len(rows):
            at = node[rows]
            node[rows] = np.where(x[rows, feature[at]] <= threshold[at], left[at], right[at])
            rows = rows[~leaf[node[rows]]]
        raw += np.asarray(tree["value"])[node]
    return _sigmoid(raw)


def _check_stacker(stacker, n_signals: int) -> None:
    """Shapes, finiteness and, for trees, children after their parent (so that walking a tree ends)."""
    def numbers(values) -> bool:
        return isinstance(values, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
        )

    n = n_signals + 1
    if stacker.get("kind") == "logistic":
        if not all(numbers(stacker.get(key)) and len(stacker[key]) == n for key in ("mean", "scale", "coef")):
            raise ValueError("quality classifier: the stacker's weights do not match its signals")
        if not numbers([stacker.get("intercept")]):
            raise ValueError("quality classifier: the stacker's intercept is not a finite number")
        return
    trees = stacker.get("trees")
    if stacker.get("kind") != "boosting" or not numbers([stacker.get("baseline")]) or not isinstance(trees, list):
        raise ValueError(f"quality classifier: unknown stacker {stacker.get('kind')!r}")
    for tree in trees:
        keys = ("feature", "threshold", "left", "right", "value", "leaf")
        if not isinstance(tree, dict) or not all(isinstance(tree.get(key), list) for key in keys):
            raise ValueError("quality classifier: a stacker tree is not a table of nodes")
        size = len(tree["leaf"])
        if size == 0 or any(len(tree[key]) != size for key in keys) or not all(numbers(tree[k]) for k in keys[:5]):
            raise ValueError("quality classifier: a stacker tree's columns differ in length or hold non-numbers")
        indices = [v for key in ("feature", "left", "right") for v in tree[key]]
        if not all(isinstance(v, int) for v in indices) or not all(isinstance(v, bool) for v in tree["leaf"]):
            raise ValueError("quality classifier: a stacker tree's node links are not integers")
        for i in range(size):
            if tree["leaf"][i]:
                continue
            if not (0 <= tree["feature"][i] < n and i < tree["left"][i] < size and i < tree["right"][i] < size):
                raise ValueError("quality classifier: a stacker tree points outside itself or backwards")


# ---------------------------------------------------------------------------------------------
# Splits, threshold and figures
# ---------------------------------------------------------------------------------------------


def stratified_split(strata: list, fraction: float, seed: int) -> np.ndarray:
    """A boolean mask of about `fraction` of the rows of every stratum, drawn with `seed`."""
    rng = np.random.default_rng(seed)
    chosen = np.zeros(len(strata), dtype=bool)
    for stratum in sorted(set(strata)):
        rows = np.flatnonzero([s == stratum for s in strata])
        n = int(round(len(rows) * fraction))
        chosen[rng.permutation(rows)[:n]] = True
    return chosen


def fold_ids(strata: list, folds: int, seed: int) -> np.ndarray:
    """A fold per row, every stratum dealt round the folds in a seeded order."""
    rng = np.random.default_rng(seed)
    ids = np.zeros(len(strata), dtype=int)
    offset = 0
    for stratum in sorted(set(strata)):
        rows = rng.permutation(np.flatnonzero([s == stratum for s in strata]))
        ids[rows] = (np.arange(len(rows)) + offset) % folds
        offset += len(rows)
    return ids


def group_fold_ids(groups: list, strata: list, folds: int, seed: int) -> np.ndarray:
    """A fold per row with every group (a site) whole in one fold, so that out-of-fold scores measure
    pages of sites the model never saw. Groups go, largest first in a seeded order, to the fold with the
    fewest rows. With fewer groups than folds: `fold_ids`."""
    names = sorted(set(groups))
    if len(names) < folds:
        return fold_ids(strata, folds, seed)
    rng = np.random.default_rng(seed)
    index = {name: i for i, name in enumerate(names)}
    codes = np.array([index[g] for g in groups])
    sizes = np.bincount(codes, minlength=len(names))
    order = sorted(rng.permutation(len(names)), key=lambda g: -sizes[g])
    fold_of, fill = np.zeros(len(names), dtype=int), np.zeros(folds, dtype=int)
    for g in order:
        fold_of[g] = int(np.argmin(fill))
        fill[fold_of[g]] += sizes[g]
    return fold_of[codes]


def balanced_accuracy(keep: np.ndarray, predicted: np.ndarray) -> float | None:
    if keep.all() or not keep.any():
        return None
    return float((predicted[keep].mean() + (~predicted[~keep]).mean()) / 2)


def best_threshold(keep: np.ndarray, scores: np.ndarray, min_retention: float | None = None) -> float:
    """The cut (keep when score >= cut), midway between two distinct scores, of highest balanced accuracy
    among the cuts that keep at least `min_retention` of the KEEP pages (all cuts when None, or when none
    does)."""
    cuts = candidate_cuts(scores)
    accuracies = np.asarray([balanced_accuracy(keep, scores >= cut) or 0.0 for cut in cuts])
    if min_retention is not None and keep.any():
        retained = np.asarray([(scores[keep] >= cut).mean() for cut in cuts])
        if (retained >= min_retention).any():
            accuracies = np.where(retained >= min_retention, accuracies, -1.0)
    return float(cuts[int(np.argmax(accuracies))])


def decision_metrics(keep: np.ndarray, scores: np.ndarray, threshold, langs: list[str]) -> dict:
    """Figures of the decisions `scores >= threshold` (one cut, or one per row), pooled and per language."""
    from sklearn.metrics import roc_auc_score

    predicted = scores >= threshold
    tp, fp = int((predicted & keep).sum()), int((predicted & ~keep).sum())
    tn, fn = int((~predicted & ~keep).sum()), int((~predicted & keep).sum())
    per_language = {}
    for lang in sorted(set(langs)):
        rows = np.asarray([value == lang for value in langs])
        per_language[lang] = {
            "n": int(rows.sum()),
            "balanced_accuracy": _round(balanced_accuracy(keep[rows], predicted[rows])),
            "keep_retention": _round(predicted[rows & keep].mean() if (rows & keep).any() else None),
            "drop_rejection": _round((~predicted[rows & ~keep]).mean() if (rows & ~keep).any() else None),
        }
    both = keep.any() and not keep.all()
    return {
        "precision": _round(tp / (tp + fp) if tp + fp else None),
        "recall": _round(tp / (tp + fn) if tp + fn else None),
        "balanced_accuracy": _round(balanced_accuracy(keep, predicted)),
        "drop_rejection": _round(tn / (tn + fp) if tn + fp else None),
        "roc_auc": _round(roc_auc_score(keep, scores) if both else None),
        "confusion": {"tp": tp, "fp": fp, "tn": tn, "fn": fn},
        "per_language": per_language,
    }


def _round(value, digits: int = 4):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), digits)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


@dataclass
class _Examples:
    texts: list[str]  # token lines, as fastText reads them
    langs: list[str]
    keep: np.ndarray
    weight: np.ndarray
    signals: np.ndarray  # rows x (q_* columns, already transformed, then the token signals)
    strata: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # the site of each page
    label_sets: list = field(default_factory=list)  # which labelled crawl each page comes from, when known
    sources: list = field(default_factory=list)  # the collection each page was labelled in (`sources`)
    html: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # whether a page has HTML signals
    kinds: list = field(default_factory=list)  # the page's kind for its cut (`page_kinds`), "" for none

    def take(self, rows: np.ndarray) -> _Examples:
        idx = np.flatnonzero(rows) if rows.dtype == bool else rows
        return _Examples([self.texts[i] for i in idx], [self.langs[i] for i in idx], self.keep[idx],
                         self.weight[idx], self.signals[idx], [self.strata[i] for i in idx],
                         [self.groups[i] for i in idx], [self.label_sets[i] for i in idx],
                         [self.sources[i] for i in idx], self.html[idx], [self.kinds[i] for i in idx])


def _check_examples(examples: pl.DataFrame, config: ClassifierConfig) -> None:
    if config.features not in FEATURES:
        raise ValueError(f"features must be one of {FEATURES}, not {config.features!r}")
    if config.stacker not in STACKERS:
        raise ValueError(f"stacker must be one of {STACKERS}, not {config.stacker!r}")
    unknown = sorted(set(config.token_signals) - set(TOKEN_SIGNALS))
    if unknown:
        raise ValueError(f"unknown token signals {unknown}; choose from {TOKEN_SIGNALS}")
    if config.folds_by not in FOLD_GROUPS:
        raise ValueError(f"folds_by must be one of {FOLD_GROUPS}, not {config.folds_by!r}")
    missing = [c for c in ("doc_id", "lang", "keep") if c not in examples.columns]
    if "text" not in examples.columns and "tokens" not in examples.columns:
        missing.append("text (or tokens)")
    if missing:
        raise ValueError(f"examples need the columns doc_id, text or tokens, lang, keep; missing {missing}")
    if examples["doc_id"].is_duplicated().any():
        raise ValueError("examples: doc_id must be unique")
    if examples["keep"].null_count():
        raise ValueError("examples: keep must be true or false on every row")
    if not 0.0 <= config.test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), not {config.test_fraction}")
    n_keep = int(examples["keep"].sum())
    counts = {"KEEP": n_keep, "DROP": examples.height - n_keep}
    needed = math.ceil(max(config.min_per_class, config.folds) / (1 - config.test_fraction))
    short = {label: n for label, n in counts.items() if n < needed}
    if short:
        raise ValueError(
            f"too few examples to train a quality classifier: {counts} labelled pages; each class needs at "
            f"least {needed} (min_per_class={config.min_per_class}, folds={config.folds}, "
            f"test_fraction={config.test_fraction})"
        )


def _tokens_and_texts(examples: pl.DataFrame) -> zip:
    """Each example's `tokens` (shipped pages) and `text`, None where a column is missing."""
    given = examples["tokens"].to_list() if "tokens" in examples.columns else [None] * examples.height
    texts = examples["text"].to_list() if "text" in examples.columns else [None] * examples.height
    return zip(given, texts)


def example_tokens(examples: pl.DataFrame, max_chars: int) -> list[list[int]]:
    """Each example's token ids: its `tokens` where given (shipped pages), else from its `text`."""
    return [list(ids) if ids is not None else token_ids(text, max_chars) for ids, text in _tokens_and_texts(examples)]


FEW_LINKS, MANY_LINKS = "few-links", "many-links"


def page_kinds(docs: pl.DataFrame, cut_by_link_share: float | None) -> list[str]:
    """Each page's kind for its cut: `few-links` (looks like an article) or `many-links` by its HTML link
    share; "" for a document without HTML, or when cuts are not split by kind."""
    if cut_by_link_share is None or "q_html_link_share" not in docs.columns:
        return [""] * docs.height
    return ["" if share is None else FEW_LINKS if share < cut_by_link_share else MANY_LINKS
            for share in docs["q_html_link_share"].cast(pl.Float64).to_list()]


def has_html(docs: pl.DataFrame) -> np.ndarray:
    """Whether each document was read from HTML: extraction measured its page (`q_html_text_ratio` set)."""
    if "q_html_text_ratio" not in docs.columns:
        return np.zeros(docs.height, dtype=bool)
    return docs["q_html_text_ratio"].is_not_null().to_numpy()


def prepare(examples: pl.DataFrame, config: ClassifierConfig) -> tuple[_Examples, list[str], list[str], list[str]]:
    """The examples as the classifier reads them, the q_* columns, which of them are log-transformed, and the
    token signals appended after them."""
    examples = examples.sort("doc_id")
    signals = signal_frame(examples, training_signal_names(examples))
    log_columns = [name for name, dtype in signals.schema.items() if dtype.is_integer()]
    weight = (examples["weight"].cast(pl.Float64).to_numpy() if "weight" in examples.columns
              else np.ones(examples.height))
    if not (np.isfinite(weight).all() and (weight > 0).all()):
        raise ValueError("examples: weight must be a positive number on every row")
    langs = [lang or "unknown" for lang in examples["lang"].to_list()]
    keep = examples["keep"].cast(pl.Boolean).to_numpy()
    ids = example_tokens(examples, config.max_chars)
    matrix = _signal_matrix(signals, log_columns)
    token_names = list(config.token_signals) if config.features == "text+signals" else []
    if token_names:
        matrix = np.column_stack([matrix, token_signal_matrix(ids, token_names)])
    data = _Examples(
        texts=[token_line(row) for row in ids],
        langs=langs, keep=keep, weight=weight, signals=matrix,
        strata=[(bool(k), lang) for lang, k in zip(langs, keep)],
        groups=sites(examples),
        label_sets=examples["label_set"].fill_null("user").to_list() if "label_set" in examples.columns
        else ["user"] * examples.height,
        sources=sources(examples),
        html=has_html(examples),
        kinds=page_kinds(examples, config.cut_by_link_share),
    )
    return data, signals.columns, log_columns, token_names


def training_signal_names(examples: pl.DataFrame) -> list[str] | None:
    """The signals a classifier trained on `examples` reads: every q_* column they carry when they carry
    the default preset's rule signals (shipped training pages), else None (computed, see `signal_frame`)."""
    rules = sorted(signal_names(preset()))
    if all(name in examples.columns for name in rules):
        page = sorted(name for name in examples.columns if name.startswith(PAGE_SIGNAL_PREFIXES))
        return rules + page
    return None


def sites(examples: pl.DataFrame) -> list[str]:
    """The site of each page: its `site` where given (shipped pages), else its URL's host without "www.";
    the doc_id where there is neither."""
    urls = examples["url"].to_list() if "url" in examples.columns else [None] * examples.height
    given = examples["site"].to_list() if "site" in examples.columns else [None] * examples.height
    return [
        site or _site(_host(url)) or doc_id for site, url, doc_id in zip(given, urls, examples["doc_id"].to_list())
    ]


def sources(examples: pl.DataFrame) -> list[str]:
    """The source of each page: the collection it was labelled in (`collection`) where given, else its site."""
    given = examples["collection"].to_list() if "collection" in examples.columns else [None] * examples.height
    return [collection or site for collection, site in zip(given, sites(examples))]


def _site(host: str | None) -> str | None:
    return host[4:] if host and host.startswith("www.") else host


def _host(url: str | None) -> str | None:
    try:
        return urlsplit(url).hostname if url else None
    except ValueError:  # a malformed URL, e.g. an unclosed IPv6 bracket
        return None


def _stack_inputs(fasttext_keep: np.ndarray, signals: np.ndarray) -> np.ndarray:
    return np.column_stack([_logit(fasttext_keep), signals])


def _folds(train: _Examples, by: str, config: ClassifierConfig) -> np.ndarray:
    if by == "page":
        return fold_ids(train.strata, config.folds, config.seed)
    return group_fold_ids(train.sources if by == "source" else train.groups, train.strata, config.folds, config.seed)


def _text_columns(names: list[str], train: _Examples, config: ClassifierConfig) -> list[int] | None:
    """The columns of the signals matrix the text model reads, or None when there is no text model: not asked
    for, fastText alone, no signal that only HTML gives, or too few pages with HTML of either label."""
    if not config.text_model or config.features != "text+signals":
        return None
    kept = [i for i, name in enumerate(names) if not name.startswith(tuple(config.text_model_without))]
    enough = min(int((train.keep & train.html).sum()), int((~train.keep & train.html).sum()))
    if len(kept) == len(names) or enough < max(config.min_per_class, config.folds):
        return None
    return kept


def _html_columns(names: list[str], config: ClassifierConfig) -> list[int]:
    """The columns of the signals matrix the HTML stacker reads."""
    return [i for i, name in enumerate(names) if not name.startswith(tuple(config.html_model_without))]


def _model_inputs(stacked: np.ndarray, columns: list[int]) -> np.ndarray:
    """A model's inputs among the stacked ones: the fastText logit, then the signals of `columns`."""
    return stacked[:, [0, *(c + 1 for c in columns)]]


def _out_of_fold(train: _Examples, config: ClassifierConfig, by: str | None = None,
                 text_columns: list[int] | None = None,
                 html_columns: list[int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # fmt: skip
    """Cross-fitted fastText P(KEEP) and, stacked, the out-of-fold scores of every training row by the HTML
    stacker and by the text model (None without one), with each source (or site, or page: `by`, default
    `config.folds_by`) whole in one fold. With a text model the HTML stacker learns from the pages with HTML."""
    folds = _folds(train, by or config.folds_by, config)
    fasttext_keep = np.zeros(len(train.texts))
    for fold in range(config.folds):
        inside, outside = train.take(folds != fold), folds == fold
        model = _load_fasttext(train_fasttext(fasttext_lines(inside.texts, inside.keep, inside.weight,
                                                                config.balance_classes), config))
        fasttext_keep[outside] = _keep_probability(model, [t for t, o in zip(train.texts, outside) if o])
    if config.features == "text":
        return fasttext_keep, fasttext_keep, None
    stacked = _stack_inputs(fasttext_keep, train.signals)
    html_stacked = stacked if html_columns is None else _model_inputs(stacked, html_columns)
    text_stacked = _model_inputs(stacked, text_columns) if text_columns is not None else None
    learns = train.html if text_columns is not None else np.ones(len(train.texts), dtype=bool)
    scores = np.zeros(len(train.texts))
    text_scores = np.zeros(len(train.texts)) if text_columns is not None else None
    for fold in range(config.folds):
        inside = folds != fold
        rows = inside & learns
        stacker = _fit_stacker(html_stacked[rows], train.keep[rows], train.weight[rows], config)
        scores[~inside] = _apply_stacker(stacker, html_stacked[~inside])
        if text_stacked is not None:
            text_stacker = _fit_stacker(text_stacked[inside], train.keep[inside], train.weight[inside], config)
            text_scores[~inside] = _apply_stacker(text_stacker, text_stacked[~inside])
    return fasttext_keep, scores, text_scores


def _decisions(part: _Examples, raw: np.ndarray, config: ClassifierConfig) -> dict:
    """A model's calibration, cuts and good-page quantiles from its out-of-fold scores of `part`."""
    calibration = fit_calibration(part, raw, config) if config.calibrate else IDENTITY_CALIBRATION
    scores = calibrate(calibration, raw, part.langs)
    threshold = best_threshold(part.keep, scores, config.min_keep_retention)
    return {
        "calibration": calibration, "threshold": threshold,
        "thresholds": language_thresholds(part, scores, threshold, config),
        "keep_quantiles": keep_quantiles(part, scores, calibration),
    }


def _routed(train: _Examples, html_raw: np.ndarray, text_raw: np.ndarray | None,
            classifier: QualityClassifier) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """Each row's calibrated score by the model that scores it as a document (`models_for`), and the model."""
    models = ["html" if html or text_raw is None else "text" for html in train.html]
    raw = html_raw if text_raw is None else np.where(train.html, html_raw, text_raw)
    return classifier.calibrated(raw, train.langs, models), models


def train_classifier(examples: pl.DataFrame, config: ClassifierConfig = ClassifierConfig(),
                     cross_validations: tuple[str, ...] = ("source", "site")) -> TrainedClassifier:  # fmt: skip
    """Train on labelled pages (doc_id, text, lang, keep; optional q_* columns, `weight`, `collection`) and
    measure the model on a held-back split and by the `cross_validations` (source-out and by site; none
    when a caller measures it itself). Same examples and config give the same bytes."""
    _check_examples(examples, config)
    data, signal_names, log_columns, token_names = prepare(examples, config)
    held_back = stratified_split(data.strata, config.test_fraction, config.seed)
    train, test = data.take(~held_back), data.take(held_back)
    for label, rows in (("KEEP", train.keep), ("DROP", ~train.keep)):
        if rows.sum() < max(config.min_per_class, config.folds):
            raise ValueError(
                f"too few {label} examples in the training split ({int(rows.sum())}) to train a quality classifier"
            )

    names = [*signal_names, *token_names]
    text_columns = _text_columns(names, train, config)
    html_columns = _html_columns(names, config)
    fasttext_keep, oof_raw, oof_text_raw = _out_of_fold(train, config, None, text_columns, html_columns)
    learns = train.html if text_columns is not None else np.ones(len(train.texts), dtype=bool)
    decisions = _decisions(train.take(learns), oof_raw[learns], config)
    lines = fasttext_lines(train.texts, train.keep, train.weight, config.balance_classes)
    fasttext_bytes = train_fasttext(lines, config)
    if train_fasttext(lines, config) != fasttext_bytes:
        raise RuntimeError(
            f"fastText training is not deterministic with {fasttext_package()}; see corpus/quality/fasttext_training.py"
        )
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION, "features": config.features, "threshold": decisions["threshold"],
        "thresholds": decisions["thresholds"], "tokens": "crc32", "max_chars": config.max_chars, "config": asdict(config),
        "stacker": None, "calibration": decisions["calibration"], "keep_quantiles": decisions["keep_quantiles"],
        "text_model": None,
    }
    if config.features == "text+signals":
        stacked = _stack_inputs(fasttext_keep, train.signals)
        stacker = _fit_stacker(_model_inputs(stacked, html_columns)[learns], train.keep[learns], train.weight[learns], config)
        manifest["stacker"] = {"signals": signal_names, "log_columns": log_columns, "token_signals": token_names,
                               "columns": [names[c] for c in html_columns], **stacker}
        if text_columns is not None:
            # A document read from text has no link share: one cut a language.
            text_decisions = _decisions(replace(train, kinds=[""] * len(train.texts)), oof_text_raw, config)
            manifest["text_model"] = {
                "signals": [names[c] for c in text_columns],
                "stacker": _fit_stacker(_model_inputs(stacked, text_columns), train.keep, train.weight, config),
                **text_decisions,
            }
    model = _pack(manifest, fasttext_bytes)

    classifier = QualityClassifier.from_bytes(model)
    if len(test.texts):
        evaluated_on = "held-back split"
        models = classifier.models_for_rows(test.html)
        keep, langs, kinds = test.keep, test.langs, test.kinds
        scores = classifier._score_normalized(test.texts, test.signals, test.langs, models)
    else:
        evaluated_on = f"out-of-fold scores of the training split, by {config.folds_by} (test_fraction=0)"
        keep, langs, kinds = train.keep, train.langs, train.kinds
        scores, models = _routed(train, oof_raw, oof_text_raw, classifier)
    metrics = decision_metrics(keep, scores, classifier.thresholds_for(langs, models, kinds), langs)
    runs = {config.folds_by: (oof_raw, oof_text_raw)}
    for by in cross_validations:
        if by not in runs:
            runs[by] = _out_of_fold(train, config, by, text_columns, html_columns)[1:]
    figures = {by: cross_validation_figures(train, *_routed(train, *runs[by], classifier), classifier, config, by)
               for by in runs}  # fmt: skip
    text_figures = {}
    if text_columns is not None:
        text_models = ["text"] * len(train.texts)
        text_figures = {by: cross_validation_figures(train, classifier.calibrated(runs[by][1], train.langs, text_models),
                                                     text_models, classifier, config, by) for by in runs}  # fmt: skip
    if {"source", "site"} <= runs.keys():
        metrics |= {
            "cross_validated": figures["source"],
            "cross_validated_by_site": figures["site"],
            "transfer_gap": transfer_gap(figures["site"], figures["source"]),
            "reliability": reliability(train, _routed(train, *runs["source"], classifier)[0]),
        }
        if text_figures:
            metrics["text_path"] = {
                "evaluated_on": "every training page scored by the text model, as a document read without HTML",
                "cross_validated": text_figures["source"],
                "cross_validated_by_site": text_figures["site"],
                "reliability": reliability(train, classifier.calibrated(runs["source"][1], train.langs,
                                                                        ["text"] * len(train.texts))),
            }
    metrics |= {
        "evaluated_on": evaluated_on,
        "threshold": _round(decisions["threshold"], 6),
        "thresholds": {lang: _round(value, 6) for lang, value in decisions["thresholds"].items()},
        "text_model_thresholds": ({lang: _round(value, 6) for lang, value in manifest["text_model"]["thresholds"].items()}
                                  if manifest["text_model"] else None),
        "threshold_reason": (
            f"maximizes balanced accuracy over the calibrated out-of-fold scores of a {config.folds}-fold "
            f"cross-validation on the training split, each {config.folds_by}'s pages in one fold"
            + (f", among the cuts that keep {config.min_keep_retention:.0%} of the KEEP pages"
               if config.min_keep_retention is not None else "")
            + ("; the text model's over every page, the HTML stacker's over the pages with HTML"
               if manifest["text_model"] else "")
        ),
        "n_train": len(train.texts),
        "n_train_with_html": int(train.html.sum()),
        "n_test": len(test.texts),
        "n_sources": len(set(train.sources)),
        "train_out_of_fold_balanced_accuracy": figures[config.folds_by]["balanced_accuracy"],
        "model_bytes": len(model),
        "features": config.features,
        "token_signals": token_names,
        "fasttext": fasttext_package(),
    }
    return TrainedClassifier(model=model, metrics=metrics, hash=model_hash(model))


def cross_validation_figures(train: _Examples, scores: np.ndarray, models: list[str], classifier: QualityClassifier,
                             config: ClassifierConfig, by: str) -> dict:  # fmt: skip
    """The figures of out-of-fold `scores` (calibrated, each row by its model) at the classifier's thresholds,
    pooled, per language and per labelled set."""
    figures = decision_metrics(train.keep, scores, classifier.thresholds_for(train.langs, models, train.kinds), train.langs)
    return {
        "evaluated_on": f"out-of-fold scores of a {config.folds}-fold cross-validation on the training split, "
        f"each {by}'s pages whole in one fold",
        **{k: figures[k] for k in ("balanced_accuracy", "drop_rejection", "recall", "roc_auc", "per_language")},
        "per_label_set": per_label_set(train, scores, models, classifier),
    }


def transfer_gap(by_site: dict, source_out: dict) -> dict:
    """By-site balanced accuracy minus source-out, pooled, per language and per labelled set: how much
    the by-site figure flatters the model."""
    def gap(a, b):
        return _round(a - b) if a is not None and b is not None else None

    out = {"all": gap(by_site["balanced_accuracy"], source_out["balanced_accuracy"])}
    for lang, row in source_out["per_language"].items():
        out[lang] = gap(by_site["per_language"].get(lang, {}).get("balanced_accuracy"), row["balanced_accuracy"])
    for name, row in source_out["per_label_set"].items():
        out[f"set {name}"] = gap(by_site["per_label_set"].get(name, {}).get("balanced_accuracy"), row["balanced_accuracy"])
    return out


def per_label_set(train: _Examples, scores: np.ndarray, models: list[str], classifier: QualityClassifier) -> dict:
    """Out-of-fold figures of each labelled crawl the training pages come from, per language too."""
    out = {}
    for name in sorted(set(train.label_sets)):
        rows = np.asarray([value == name for value in train.label_sets])
        part = train.take(rows)
        part_models = [m for m, r in zip(models, rows) if r]
        figures = decision_metrics(part.keep, scores[rows], classifier.thresholds_for(part.langs, part_models, part.kinds),
                                   part.langs)
        out[name] = {k: figures[k] for k in ("balanced_accuracy", "recall", "drop_rejection", "per_language")}
    return out


def _base_langs(train: _Examples) -> np.ndarray:
    return np.asarray([base_lang(lang) or "unknown" for lang in train.langs], dtype=object)


def _calibration_languages(train: _Examples, config: ClassifierConfig) -> tuple[np.ndarray, list[str]]:
    """Each row's base language, and the languages with `language_threshold_min_per_class` pages of each label."""
    langs = _base_langs(train)
    enough = [lang for lang in sorted(set(langs)) if min(int(train.keep[langs == lang].sum()),
              int((~train.keep[langs == lang]).sum())) >= config.language_threshold_min_per_class]  # fmt: skip
    return langs, enough if config.thresholds_by_language else []


def fit_calibration(train: _Examples, raw: np.ndarray, config: ClassifierConfig) -> dict:
    """Platt scaling of the out-of-fold scores, P(KEEP) = sigmoid(a * logit(score) + b): pooled (`*`) and
    per language with enough pages of both labels. The pages are weighted so that KEEP and DROP weigh
    the same in each language: a calibrated 0.5 is as far from a typical good page as from a junk one,
    whatever the mix of the labelled set."""
    from sklearn.linear_model import LogisticRegression

    langs, enough = _calibration_languages(train, config)
    out = {}
    for lang in [ANY_LANGUAGE, *enough]:
        rows = np.ones(len(langs), dtype=bool) if lang == ANY_LANGUAGE else langs == lang
        model = LogisticRegression(C=1e4, class_weight="balanced", max_iter=1000)
        model.fit(_logit(raw[rows]).reshape(-1, 1), train.keep[rows])
        out[lang] = {"a": round(float(model.coef_[0][0]), 6), "b": round(float(model.intercept_[0]), 6)}
    return out


IDENTITY_CALIBRATION = {ANY_LANGUAGE: {"a": 1.0, "b": 0.0}}


def calibrate(calibration: dict, raw: np.ndarray, langs: list[str | None]) -> np.ndarray:
    """The calibrated P(KEEP) of raw scores, each by its language's scaling (else the pooled one)."""
    pooled = calibration[ANY_LANGUAGE]
    params = [calibration.get(base_lang(lang) or "unknown", pooled) for lang in langs]
    a = np.asarray([p["a"] for p in params], dtype=float)
    b = np.asarray([p["b"] for p in params], dtype=float)
    return _sigmoid(a * _logit(raw) + b)


def keep_quantiles(train: _Examples, scores: np.ndarray, calibration: dict) -> dict:
    """Per calibrated language (and pooled), the 0 %, 1 %, ..., 100 % quantiles of the KEEP pages'
    calibrated out-of-fold scores: the cut that keeps a share r of the good pages is the (1 - r) quantile."""
    langs = _base_langs(train)
    out = {}
    for lang in calibration:
        rows = train.keep & (np.ones(len(langs), dtype=bool) if lang == ANY_LANGUAGE else langs == lang)
        out[lang] = [round(float(v), 6) for v in np.quantile(scores[rows], np.linspace(0, 1, QUANTILES))]
    return out


def reliability(train: _Examples, scores: np.ndarray) -> dict:
    """Per language, the calibrated source-out scores in `RELIABILITY_BINS` equal bins: pages, mean score
    and the share of them labelled KEEP (a calibrated model's two columns agree)."""
    langs = _base_langs(train)
    bins = np.minimum((scores * RELIABILITY_BINS).astype(int), RELIABILITY_BINS - 1)
    out = {}
    for lang in sorted(set(langs)):
        rows = langs == lang
        table = []
        for b in range(RELIABILITY_BINS):
            inside = rows & (bins == b)
            if inside.any():
                table.append({"bin": f"{b / RELIABILITY_BINS:.1f}-{(b + 1) / RELIABILITY_BINS:.1f}", "pages": int(inside.sum()),
                              "mean_score": _round(scores[inside].mean(), 3), "keep_share": _round(train.keep[inside].mean(), 3)})  # fmt: skip
        out[lang] = table
    return out


def language_thresholds(train: _Examples, scores: np.ndarray, pooled: float, config: ClassifierConfig) -> dict:
    """The pooled cut, one per language whose out-of-fold scores hold `language_threshold_min_per_class`
    pages of each label, and one per language and page kind (`lang|kind`, `page_kinds`) that does."""
    thresholds = {ANY_LANGUAGE: pooled}
    langs, enough = _calibration_languages(train, config)
    kinds = np.asarray(train.kinds if len(train.kinds) == len(langs) else [""] * len(langs), dtype=object)
    for lang in enough:
        rows = langs == lang
        thresholds[lang] = best_threshold(train.keep[rows], scores[rows], config.min_keep_retention)
        split = [kind for kind in sorted(set(kinds[rows]) - {""}) if min(
            int((train.keep & rows & (kinds == kind)).sum()), int((~train.keep & rows & (kinds == kind)).sum())
        ) >= config.language_threshold_min_per_class]  # fmt: skip
        if len(split) == 2:
            for kind, cut in zip(split, kind_thresholds(train.keep[rows], scores[rows], kinds[rows] == split[0],
                                                        config.min_keep_retention)):  # fmt: skip
                thresholds[f"{lang}|{kind}"] = cut
    return thresholds


def candidate_cuts(scores: np.ndarray, most: int | None = None) -> np.ndarray:
    """The lowest score and every midpoint between two distinct scores; at most `most` of them (quantiles)."""
    values = np.unique(scores)
    cuts = np.concatenate([[values[0]], (values[:-1] + values[1:]) / 2]) if len(values) > 1 else values
    return cuts if most is None or len(cuts) <= most else np.unique(np.quantile(cuts, np.linspace(0, 1, most)))


def kind_thresholds(keep: np.ndarray, scores: np.ndarray, first: np.ndarray,
                    min_retention: float | None) -> tuple[float, float]:  # fmt: skip
    """Two cuts, for the rows of `first` and for the others, of highest balanced accuracy over all the rows
    among the pairs that keep at least `min_retention` of the KEEP rows in all (every pair when none does)."""
    n_keep, n_drop = max(int(keep.sum()), 1), max(int((~keep).sum()), 1)
    counts = []
    for rows in (first, ~first):
        cuts = candidate_cuts(scores[rows], most=200)
        kept_keep = np.asarray([(scores[rows & keep] >= cut).sum() for cut in cuts])
        kept_drop = np.asarray([(scores[rows & ~keep] >= cut).sum() for cut in cuts])
        counts.append((cuts, kept_keep, kept_drop))
    (cuts_a, keep_a, drop_a), (cuts_b, keep_b, drop_b) = counts
    retention = (keep_a[:, None] + keep_b[None, :]) / n_keep
    accuracy = (retention + 1 - (drop_a[:, None] + drop_b[None, :]) / n_drop) / 2
    if min_retention is not None and (retention >= min_retention).any():
        accuracy = np.where(retention >= min_retention, accuracy, -1.0)
    i, j = np.unravel_index(int(np.argmax(accuracy)), accuracy.shape)
    return float(cuts_a[i]), float(cuts_b[j])


# ---------------------------------------------------------------------------------------------
# The artefact
# ---------------------------------------------------------------------------------------------


def _pack(manifest: dict, fasttext_bytes: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in ((MANIFEST_ENTRY, json.dumps(manifest, sort_keys=True, indent=1).encode()),
                           (FASTTEXT_ENTRY, fasttext_bytes)):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compresslevel=6)
    return buffer.getvalue()


def _unpack(data: bytes) -> tuple[dict, bytes]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise ValueError(f"not a quality classifier: not a zip archive ({exc})") from None
    with archive:
        names = sorted(archive.namelist())
        if names != sorted([MANIFEST_ENTRY, FASTTEXT_ENTRY]):
            raise ValueError(
                f"not a quality classifier: entries {names[:10]}, expected {MANIFEST_ENTRY} and {FASTTEXT_ENTRY}"
            )
        for info in archive.infolist():
            if info.file_size > MAX_ENTRY_BYTES:
                raise ValueError(f"not a quality classifier: {info.filename} unpacks to {info.file_size} bytes")
        try:
            manifest = json.loads(archive.read(MANIFEST_ENTRY))
            fasttext_bytes = archive.read(FASTTEXT_ENTRY)
        except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
            raise ValueError(f"not a quality classifier: damaged archive ({exc})") from None
    _check_manifest(manifest)
    return manifest, fasttext_bytes


def _check_manifest(manifest) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError("not a quality classifier: classifier.json has no lm_assets.quality_classifier format")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"quality classifier format version {manifest.get('version')}; this code reads {READABLE_VERSIONS}"
        )
    if manifest.get("features") not in FEATURES:
        raise ValueError(f"quality classifier: unknown features {manifest.get('features')!r}")
    if not isinstance(manifest.get("max_chars"), int):
        raise ValueError("quality classifier: max_chars missing")
    if manifest["version"] >= 3:
        _check_decisions(manifest)
    elif not isinstance(manifest.get("threshold"), (int, float)) or not isinstance(manifest.get("thresholds"), dict):
        raise ValueError("quality classifier: thresholds are not a table of language -> number")
    if manifest["version"] < 4 and manifest.get("text_model") is not None:
        raise ValueError("quality classifier: a text model in an artefact older than format version 4")
    if manifest.get("tokens") != "crc32":
        raise ValueError(f"quality classifier: unknown token form {manifest.get('tokens')!r}")
    stacker = manifest.get("stacker")
    if manifest["features"] == "text+signals":
        if not isinstance(stacker, dict):
            raise ValueError("quality classifier: text+signals without a stacker")
        names = stacker.get("signals", []) + stacker.get("log_columns", []) + stacker.get("token_signals", [])
        if not isinstance(names, list) or not all(isinstance(name, str) and name.startswith("q_") for name in names):
            raise ValueError("quality classifier: the stacker's signals are not q_* column names")
        unknown = sorted(set(stacker.get("token_signals", [])) - set(TOKEN_SIGNALS))
        if unknown:
            raise ValueError(f"quality classifier: token signals {unknown} that this code does not compute")
        columns = stacker["signals"] + stacker.get("token_signals", [])
        read = stacker.get("columns", columns)
        if not isinstance(read, list) or not set(read) <= set(columns):
            raise ValueError("quality classifier: the stacker reads columns it does not compute")
        _check_stacker(stacker, len(read))
        text_model = manifest.get("text_model")
        if text_model is not None:
            _check_text_model(text_model, columns)


def _check_text_model(text_model, columns: list[str]) -> None:
    """The text model reads a subset of the HTML stacker's columns, and has its own calibration and cuts."""
    if not isinstance(text_model, dict) or not isinstance(text_model.get("signals"), list):
        raise ValueError("quality classifier: the text model is not a table with its signals")
    if not set(text_model["signals"]) <= set(columns):
        raise ValueError("quality classifier: the text model reads signals the HTML stacker does not compute")
    _check_decisions(text_model)
    _check_stacker(text_model.get("stacker") or {}, len(text_model["signals"]))


def _check_decisions(model: dict) -> None:
    """A model's calibration, good-page quantiles and cuts are tables of finite numbers."""
    calibration, quantiles = model.get("calibration"), model.get("keep_quantiles")
    if not isinstance(calibration, dict) or ANY_LANGUAGE not in calibration or not all(
        isinstance(v, dict) and all(isinstance(v.get(k), (int, float)) and math.isfinite(v[k]) for k in "ab")
        for v in calibration.values()
    ):
        raise ValueError("quality classifier: calibration is not a table of language -> {a, b}")
    if not isinstance(quantiles, dict) or not all(
        isinstance(v, list) and len(v) == QUANTILES and all(isinstance(x, (int, float)) for x in v)
        for v in quantiles.values()
    ):
        raise ValueError(f"quality classifier: keep_quantiles is not a table of language -> {QUANTILES} numbers")
    thresholds = model.get("thresholds")
    if not isinstance(model.get("threshold"), (int, float)) or not isinstance(thresholds, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and math.isfinite(v) for k, v in thresholds.items()
    ):
        raise ValueError("quality classifier: thresholds are not a table of language -> number")


class QualityClassifier:
    """A trained classifier, loaded from its artefact. A document with HTML signals is scored by the HTML
    stacker; one without (read from text) by the text model where the artefact has one (`models_for`)."""

    def __init__(self, manifest: dict, fasttext_model, data: bytes):
        self.manifest = manifest
        self.features: str = manifest["features"]
        self.threshold: float = float(manifest["threshold"])
        self.thresholds: dict[str, float] = {k: float(v) for k, v in manifest["thresholds"].items()}
        self.calibration: dict | None = manifest.get("calibration")
        self.keep_quantiles: dict[str, list[float]] = manifest.get("keep_quantiles") or {}
        self.text_model: dict | None = manifest.get("text_model")
        self.hash = model_hash(data)
        self._fasttext = fasttext_model

    @classmethod
    def from_bytes(cls, data: bytes) -> QualityClassifier:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("QualityClassifier.from_bytes takes the artefact's bytes")
        data = bytes(data)
        manifest, fasttext_bytes = _unpack(data)
        return cls(manifest, _load_fasttext(fasttext_bytes), data)

    def models_for(self, docs: pl.DataFrame) -> list[str]:
        """The model that scores each row: "html", or "text" for a document without HTML signals when the
        artefact has a text model (without one, such a document is read as a page that is all text)."""
        return self.models_for_rows(has_html(docs))

    def models_for_rows(self, html: np.ndarray) -> list[str]:
        return ["html" if row or self.text_model is None else "text" for row in html]

    def score(self, docs: pl.DataFrame) -> np.ndarray:
        """Calibrated P(KEEP) per row of `docs` (text, lang; `q_*` columns are reused when present)."""
        return self.score_with_models(docs)[0]

    def score_with_models(self, docs: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
        """`score`, and the model that scored each row."""
        max_chars = self.manifest["max_chars"]
        texts = [token_line(ids) if ids is not None else text_token_line(text, max_chars)
                 for ids, text in _tokens_and_texts(docs)]
        models = self.models_for(docs)
        signals = None
        stacker = self.manifest["stacker"]
        if self.features == "text+signals":
            names = stacker["signals"]
            if self.text_model is not None:
                # A frame of documents read from text may lack the page columns altogether; the text model
                # does not read them.
                absent = [n for n in names if n.startswith(PAGE_SIGNAL_PREFIXES) and n not in docs.columns]
                if absent and "html" not in models:
                    docs = docs.with_columns([pl.lit(None, dtype=pl.Float64).alias(n) for n in absent])
            signals = _signal_matrix(signal_frame(docs, names), stacker["log_columns"])
            token_names = stacker.get("token_signals") or []
            if token_names:
                ids = [[int(word, 16) for word in line.split()] for line in texts]
                signals = np.column_stack([signals, token_signal_matrix(ids, token_names)])
        langs = docs["lang"].to_list() if "lang" in docs.columns else [None] * docs.height
        return self._score_normalized(texts, signals, langs, models), models

    def keep(self, docs: pl.DataFrame) -> np.ndarray:
        """The keep/drop decision per row at the trained threshold of its language and model."""
        scores, models = self.score_with_models(docs)
        return scores >= self.thresholds_for(docs["lang"].to_list(), models, self.page_kinds(docs))

    def _model_tables(self, model: str) -> dict:
        if model == "text" and self.text_model is not None:
            return self.text_model
        return {"threshold": self.threshold, "thresholds": self.thresholds, "calibration": self.calibration,
                "keep_quantiles": self.keep_quantiles}

    def thresholds_for(self, langs: list[str | None], models: list[str] | None = None,
                       kinds: list[str] | None = None) -> np.ndarray:  # fmt: skip
        """The cut per row: its model's (the HTML stacker's by default) for its language and page kind
        (`page_kinds`), else for its language, else the pooled one."""
        models = models or ["html"] * len(langs)
        kinds = kinds or [""] * len(langs)
        cuts = []
        for lang, model, kind in zip(langs, models, kinds, strict=True):
            tables = self._model_tables(model)
            pooled = tables["thresholds"].get(ANY_LANGUAGE, tables["threshold"])
            lang = base_lang(lang) or "unknown"
            cuts.append(float(tables["thresholds"].get(f"{lang}|{kind}", tables["thresholds"].get(lang, pooled))))
        return np.asarray(cuts, dtype=float)

    def page_kinds(self, docs: pl.DataFrame) -> list[str]:
        """Each row's page kind for its cut, as this classifier was trained to split them."""
        return page_kinds(docs, (self.manifest.get("config") or {}).get("cut_by_link_share"))

    def cut_for_retention(self, lang: str | None, retention: float, model: str = "html") -> float:
        """The score cut that keeps a share `retention` of a language's good pages, as the model's source-out
        scores say (the pooled ones for a language without its own)."""
        quantiles_by_lang = self._model_tables(model)["keep_quantiles"]
        if not quantiles_by_lang:
            raise ValueError("this classifier has no score quantiles (format version 2): retrain it to decide by retention")
        if not 0.0 < retention <= 1.0:
            raise ValueError(f"a retention is a share in (0, 1], not {retention}")
        quantiles = quantiles_by_lang.get(base_lang(lang) or "unknown", quantiles_by_lang[ANY_LANGUAGE])
        return float(np.interp(1.0 - retention, np.linspace(0, 1, QUANTILES), quantiles))

    def calibrated(self, raw: np.ndarray, langs: list[str | None], models: list[str]) -> np.ndarray:
        """Raw scores calibrated, each by its model's scaling for its language."""
        out = np.asarray(raw, dtype=float).copy()
        for model in set(models):
            rows = np.asarray([m == model for m in models])
            calibration = self._model_tables(model)["calibration"]
            if calibration is not None:
                out[rows] = calibrate(calibration, out[rows], [lang for lang, r in zip(langs, rows) if r])
        return out

    def _score_normalized(self, texts: list[str], signals: np.ndarray | None, langs: list[str | None],
                          models: list[str] | None = None) -> np.ndarray:  # fmt: skip
        models = models or ["html"] * len(texts)
        fasttext_keep = _keep_probability(self._fasttext, texts)
        if self.features == "text":
            raw = fasttext_keep
        else:
            stacked = _stack_inputs(fasttext_keep, signals)
            raw = np.zeros(len(texts))
            html = np.asarray([m == "html" for m in models], dtype=bool)
            stacker = self.manifest["stacker"]
            columns = stacker["signals"] + (stacker.get("token_signals") or [])
            if html.any():
                read = [columns.index(name) for name in stacker.get("columns", columns)]
                raw[html] = _apply_stacker(stacker, _model_inputs(stacked[html], read))
            if (~html).any():
                text_columns = [columns.index(name) for name in self.text_model["signals"]]
                raw[~html] = _apply_stacker(self.text_model["stacker"], _model_inputs(stacked[~html], text_columns))
        return self.calibrated(raw, langs, models)
