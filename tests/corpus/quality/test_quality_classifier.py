"""The quality classifier trained on the 50 labelled pages of the development slice (bench/dev_set)."""

import io
import json
import random
import re
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.audit.agreement import read_labels
from lm_assets.corpus.curation.extract import extract_documents
from lm_assets.corpus.curation.rules import preset, rule_signals
from lm_assets.corpus.ingest.readers import read_shard
from lm_assets.corpus.quality.classifier import (
    FASTTEXT_ENTRY,
    MANIFEST_ENTRY,
    ClassifierConfig,
    QualityClassifier,
    group_fold_ids,
    normalize_text,
    sites,
    sources,
    text_token_line,
    token_ids,
    token_line,
    tokens,
    train_classifier,
)
from lm_assets.text import CJK_PUNCTUATION_RANGES, CJK_RANGES, char_class

SLICE = Path(__file__).resolve().parents[2] / "data" / "dev-slice"
CONFIG = ClassifierConfig()

PROSE = (
    "The write-ahead log records every change before it reaches the database file. When a transaction "
    "commits, its pages are appended to the log and the database file is left untouched, so readers keep "
    "seeing a consistent snapshot. A checkpoint later copies the pages back. This design lets one writer "
    "and many readers work at the same time, and it makes a crash during a commit harmless: the log is "
    "replayed when the database is opened again.\n\nThe size of the log grows until a checkpoint runs. "
    "Applications that never close their connections should run one themselves, because otherwise the "
    "log keeps growing and reads become slower."
)
NAVIGATION = "\n".join(["Home", "Next", "Prev", "Up", "Index", "Contents", "Search", "Download", "About", "Top"] * 3)
CHINESE_PROSE = (
    "预写日志在修改写入数据库文件之前记录每一次变更。事务提交时，它的页面被追加到日志中，数据库文件保持不变，"
    "因此读取者始终看到一致的快照。检查点稍后把这些页面复制回去。这样的设计让一个写入者和多个读取者可以同时工作，"
    "并且提交过程中的崩溃不会造成损害：再次打开数据库时会重放日志。"
)


@pytest.fixture(scope="module")
def examples() -> pl.DataFrame:
    pages = extract_documents(read_shard(SLICE / "slice.warc.gz").documents).kept
    labels = read_labels(SLICE / "labels.jsonl").select("url", "lang", "label")
    return (
        pages.select("doc_id", "url", "text")
        .join(labels, on="url")
        .unique("url", keep="first")
        .select("doc_id", "text", "lang", (pl.col("label") == "KEEP").alias("keep"))
        .sort("doc_id")
    )


@pytest.fixture(scope="module")
def stacked(examples):
    return train_classifier(examples, CONFIG)


@pytest.fixture(scope="module")
def text_only(examples):
    return train_classifier(examples, replace(CONFIG, features="text"))


def pages(*texts: str, lang: str = "en") -> pl.DataFrame:
    ids = [str(i) for i in range(len(texts))]
    return pl.DataFrame({"doc_id": ids, "text": list(texts), "lang": [lang] * len(texts)})


def test_metrics_describe_the_held_back_split(stacked, examples):
    metrics = stacked.metrics
    assert metrics["n_train"] + metrics["n_test"] == examples.height == 50
    assert sum(metrics["confusion"].values()) == metrics["n_test"]
    assert set(metrics["per_language"]) == {"en", "zh"}
    assert metrics["features"] == "text+signals" and metrics["model_bytes"] == len(stacked.model)
    assert metrics["fasttext"]["package"] != "unknown"
    assert "balanced accuracy" in metrics["threshold_reason"]
    assert metrics["roc_auc"] >= 0.8
    assert len(stacked.model) < 4 << 20


def test_an_obvious_keep_page_scores_above_an_obvious_drop_page(stacked, text_only):
    for trained in (stacked, text_only):
        classifier = QualityClassifier.from_bytes(trained.model)
        keep, drop = classifier.score(pages(PROSE, NAVIGATION))
        assert keep > drop
    assert QualityClassifier.from_bytes(stacked.model).keep(pages(PROSE, NAVIGATION)).tolist() == [True, False]


def test_same_examples_and_seed_give_the_same_bytes(examples, stacked):
    again = train_classifier(examples.sample(fraction=1.0, shuffle=True, seed=7), CONFIG)
    assert again.model == stacked.model and again.hash == stacked.hash
    assert train_classifier(examples, replace(CONFIG, seed=1)).hash != stacked.hash


def test_round_trip_gives_identical_scores_and_reuses_signals(stacked, examples):
    first, second = QualityClassifier.from_bytes(stacked.model), QualityClassifier.from_bytes(stacked.model)
    assert first.hash == stacked.hash and first.features == "text+signals" and 0 < first.threshold < 1
    scores = first.score(examples)
    assert np.array_equal(scores, second.score(examples))
    assert ((scores >= 0) & (scores <= 1)).all()
    with_signals = pl.concat(
        [examples, rule_signals(examples["text"].to_list(), examples["lang"].to_list(), preset())], how="horizontal"
    )
    assert np.array_equal(first.score(with_signals), scores)


def test_the_logistic_stacker_works_too(examples):
    trained = train_classifier(examples, replace(CONFIG, stacker="logistic"))
    classifier = QualityClassifier.from_bytes(trained.model)
    assert classifier.manifest["stacker"]["kind"] == "logistic"
    keep, drop = classifier.score(pages(PROSE, NAVIGATION))
    assert keep > drop


def test_text_only_model_reads_no_signals(text_only, examples):
    classifier = QualityClassifier.from_bytes(text_only.model)
    assert classifier.features == "text" and classifier.manifest["stacker"] is None
    assert text_only.metrics["features"] == "text"
    scores = classifier.score(examples.select("doc_id", "text", "lang"))
    assert scores.shape == (examples.height,)


def spaced_out_tokens(text: str, max_chars: int) -> list[str]:
    """The tokens by their definition: every punctuation mark, then every CJK character, spaced out, then
    the text split on white space."""
    cjk = re.compile(f"([{char_class(CJK_RANGES + CJK_PUNCTUATION_RANGES)}])")
    text = re.sub(r"([^\w\s])", r" \1 ", text[:max_chars].lower())
    return cjk.sub(r" \1 ", text).split()


def test_tokens_are_the_spaced_out_characters_split_on_white_space():
    draw = random.Random(7)
    alphabet = [chr(c) for c in [*range(0x20, 0x250), *range(0x3000, 0x3040), *range(0x4E00, 0x4E40), *range(0xFF00, 0xFF66),
                                 *range(0x20000, 0x20010), 0x1C, 0x85, 0xA0, 0x2028, 0x130, 0x3A3, 0xAC00, 0x30A2]]  # fmt: skip
    texts = ["".join(draw.choice(alphabet) for _ in range(draw.randint(0, 120))) for _ in range(2000)]
    texts += ["预写日志，Write-Ahead\n\nLog", "İstanbul ΣΟΦΟΣ", "a\u3000b\x1cc", "日本語のテキスト、한국어."]
    for text in texts:
        for max_chars in (7, 3000):
            assert tokens(text, max_chars) == spaced_out_tokens(text, max_chars), repr(text)


def test_the_cached_token_line_is_the_hashed_one(examples):
    texts = [*examples["text"].to_list(), "预写日志，Write-Ahead\n\nLog", "", None]
    for max_chars in (7, 3000):
        assert [text_token_line(t, max_chars) for t in texts] == [token_line(token_ids(t, max_chars)) for t in texts]


def test_chinese_pages_are_read_as_characters_and_scored(stacked):
    assert normalize_text("预写日志，Write-Ahead\n\nLog", 100) == "预 写 日 志 ， write - ahead log"
    scores = QualityClassifier.from_bytes(stacked.model).score(pages(CHINESE_PROSE, "目录 上一页 下一页", lang="zh"))
    assert np.isfinite(scores).all() and ((scores >= 0) & (scores <= 1)).all()


def test_too_few_examples_or_one_class_is_refused(examples):
    with pytest.raises(ValueError, match="too few examples"):
        train_classifier(examples.head(12), CONFIG)
    with pytest.raises(ValueError, match="DROP"):
        train_classifier(examples.filter(pl.col("keep")), CONFIG)
    with pytest.raises(ValueError, match="features"):
        train_classifier(examples, replace(CONFIG, features="signals"))


def repack(model: bytes, **entries: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(model)) as archive:
        contents = {name: archive.read(name) for name in archive.namelist()}
    contents.update(entries)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_corrupt_or_foreign_artefacts_are_refused(stacked):
    import pickle

    manifest = json.loads(zipfile.ZipFile(io.BytesIO(stacked.model)).read(MANIFEST_ENTRY))
    looping = json.loads(json.dumps(manifest))
    tree = looping["stacker"]["trees"][0]
    tree["left"][0] = 0
    bad = {
        "not a zip": b"\x80\x04K\x01.",
        "truncated": stacked.model[: len(stacked.model) // 2],
        "pickle inside": repack(stacked.model, **{"stacker.pkl": pickle.dumps({"a": 1})}),
        "fastText entry replaced": repack(stacked.model, **{FASTTEXT_ENTRY: pickle.dumps([1, 2, 3])}),
        "manifest not JSON": repack(stacked.model, **{MANIFEST_ENTRY: b"\x80\x04"}),
        "other format": repack(stacked.model, **{MANIFEST_ENTRY: json.dumps({**manifest, "format": "x"}).encode()}),
        "tree pointing backwards": repack(stacked.model, **{MANIFEST_ENTRY: json.dumps(looping).encode()}),
        "unknown stacker": repack(
            stacked.model,
            **{MANIFEST_ENTRY: json.dumps({**manifest, "stacker": {**manifest["stacker"], "kind": "pickle"}}).encode()},
        ),
    }
    for name, data in bad.items():
        with pytest.raises(ValueError, match="quality classifier"):
            QualityClassifier.from_bytes(data)
        assert name


def test_site_folds_keep_every_site_whole_and_balance_the_folds():
    groups = ["a.example"] * 40 + ["b.example"] * 30 + ["c.example"] * 20 + ["d.example"] * 10 + [f"s{i}" for i in range(20)]
    strata = [(i % 3 == 0, "en") for i in range(len(groups))]
    folds = group_fold_ids(groups, strata, folds=5, seed=0)
    for site in set(groups):
        assert len({int(f) for f, g in zip(folds, groups) if g == site}) == 1, site
    assert sorted(np.bincount(folds, minlength=5).tolist()) == [15, 15, 20, 30, 40]
    assert (group_fold_ids(groups, strata, 5, seed=0) == folds).all()


def test_site_folds_fall_back_to_page_folds_with_fewer_sites_than_folds():
    groups, strata = ["a"] * 10 + ["b"] * 10, [(i % 2 == 0, "en") for i in range(20)]
    folds = group_fold_ids(groups, strata, folds=5, seed=0)
    assert np.bincount(folds).tolist() == [4, 4, 4, 4, 4]


def test_the_site_of_a_page_is_its_url_host_else_its_doc_id():
    frame = pl.DataFrame({"doc_id": ["1", "2", "3", "4"],
                          "url": ["https://Docs.Example/a", None, "http://[::1/x", "https://docs.example/b"]})
    assert sites(frame) == ["docs.example", "2", "3", "docs.example"]
    assert sites(frame.drop("url")) == ["1", "2", "3", "4"]


def test_the_source_of_a_page_is_its_collection_else_its_site():
    frame = pl.DataFrame({"doc_id": ["1", "2", "3"], "url": ["https://a.example/x", "https://b.example/y", None],
                          "collection": ["blogs", None, None]})  # fmt: skip
    assert sources(frame) == ["blogs", "b.example", "3"]
    assert sources(frame.drop("collection")) == ["a.example", "b.example", "3"]


def test_figures_come_source_out_and_by_site_side_by_side_and_scores_are_calibrated(examples):
    collection = [f"c{zlib.crc32(d.encode()) % 4}" for d in examples["doc_id"]]
    trained = train_classifier(examples.with_columns(pl.Series("collection", collection)), replace(CONFIG, folds=3))
    metrics = trained.metrics
    assert "each source's pages whole" in metrics["cross_validated"]["evaluated_on"]
    assert "each site's pages whole" in metrics["cross_validated_by_site"]["evaluated_on"]
    assert metrics["transfer_gap"]["all"] == pytest.approx(
        metrics["cross_validated_by_site"]["balanced_accuracy"] - metrics["cross_validated"]["balanced_accuracy"], abs=1e-3)
    assert metrics["n_sources"] == 4 and set(metrics["reliability"]) == {"en", "zh"}
    assert sum(row["pages"] for table in metrics["reliability"].values() for row in table) == metrics["n_train"]
    classifier = QualityClassifier.from_bytes(trained.model)
    scaling = classifier.calibration["*"]
    assert classifier.manifest["version"] == 4 and scaling["a"] > 0
    # The scores are the model's raw P(KEEP) scaled: sigmoid(a logit(p) + b).
    raw = QualityClassifier.from_bytes(repack(trained.model, **{MANIFEST_ENTRY: json.dumps(
        {**classifier.manifest, "version": 2, "calibration": None, "keep_quantiles": None, "text_model": None}).encode()}))
    assert raw.calibration is None
    p = np.clip(raw.score(examples), 1e-4, 1 - 1e-4)
    expected = 1 / (1 + np.exp(-(scaling["a"] * np.log(p / (1 - p)) + scaling["b"])))
    assert np.allclose(classifier.score(examples), expected)
    with pytest.raises(ValueError, match="format version 2"):
        raw.cut_for_retention("en", 0.9)


def test_a_retention_target_is_a_quantile_of_the_good_pages_source_out_scores(stacked):
    classifier = QualityClassifier.from_bytes(stacked.model)
    quantiles = classifier.keep_quantiles["*"]
    assert len(quantiles) == 101 and quantiles == sorted(quantiles)
    assert classifier.cut_for_retention("en", 1.0) == quantiles[0]
    assert classifier.cut_for_retention("fr", 0.5) == pytest.approx(quantiles[50])
    assert classifier.cut_for_retention("en", 0.9) <= classifier.cut_for_retention("en", 0.5)
    with pytest.raises(ValueError, match="share in"):
        classifier.cut_for_retention("en", 0.0)


@pytest.fixture(scope="module")
def pages_with_html() -> pl.DataFrame:
    """The slice's pages with extraction's page signals, and each page's text again as a document read
    without HTML (its page signals null), as a labelled text set would add."""
    from lm_assets.corpus.curation.extract import PAGE_COLUMNS

    pages = extract_documents(read_shard(SLICE / "slice.warc.gz").documents).kept
    labels = read_labels(SLICE / "labels.jsonl").select("url", "lang", "label")
    html = (pages.select("doc_id", "url", "text", *PAGE_COLUMNS).join(labels, on="url").unique("url", keep="first")
            .with_columns((pl.col("label") == "KEEP").alias("keep")).drop("label").sort("doc_id"))
    as_text = html.with_columns(pl.col("doc_id") + "-text", pl.lit("texts").alias("collection"),
                                *[pl.lit(None, dtype=html.schema[c]).alias(c) for c in PAGE_COLUMNS if c.startswith(("q_html_", "q_title_"))])
    return pl.concat([html.with_columns(pl.lit(None, pl.String).alias("collection")), as_text])


def test_documents_without_html_are_scored_by_a_text_model_trained_for_them(pages_with_html):
    config = replace(CONFIG, folds=3, language_threshold_min_per_class=3)
    trained = train_classifier(pages_with_html, config)
    classifier = QualityClassifier.from_bytes(trained.model)
    text_model = classifier.text_model
    assert text_model is not None and trained.metrics["n_train_with_html"] < trained.metrics["n_train"]
    assert not [name for name in text_model["signals"] if name.startswith(("q_html_", "q_title_"))]
    assert {"q_url_depth", "q_tok_separators"} <= set(text_model["signals"])
    # The token signals go to the text model alone by default.
    assert not [name for name in classifier.manifest["stacker"]["columns"] if name.startswith("q_tok_")]
    html = pages_with_html.filter(pl.col("q_html_text_ratio").is_not_null())
    text = pages_with_html.filter(pl.col("q_html_text_ratio").is_null())
    html_scores, html_models = classifier.score_with_models(html)
    text_scores, text_models = classifier.score_with_models(text)
    assert set(html_models) == {"html"} and set(text_models) == {"text"}
    assert not np.allclose(html_scores, text_scores) and ((0 <= text_scores) & (text_scores <= 1)).all()
    # A frame of texts without any page column is read by the text model too.
    bare = text.select("doc_id", "text", "lang", "url")
    assert classifier.models_for(bare) == ["text"] * bare.height
    # Each model decides at its own cuts.
    cuts = classifier.thresholds_for(["en", "en"], ["html", "text"])
    assert cuts[1] == text_model["thresholds"].get("en", text_model["threshold"])
    assert "text_path" in trained.metrics and trained.metrics["text_path"]["cross_validated"]["roc_auc"] is not None
    # Without the text model (or with version 3 artefacts), a text document is read as a page that is all text.
    single = QualityClassifier.from_bytes(train_classifier(pages_with_html, replace(config, text_model=False)).model)
    assert single.text_model is None and set(single.models_for(text)) == {"html"}


def test_article_like_and_link_heavy_pages_are_cut_apart_under_one_retention_floor():
    from lm_assets.corpus.quality.classifier import kind_thresholds, page_kinds

    frame = pl.DataFrame({"q_html_link_share": [0.05, 0.6, None, 0.29]})
    assert page_kinds(frame, 0.3) == ["few-links", "many-links", "", "few-links"]
    assert page_kinds(frame, None) == [""] * 4
    rng = np.random.default_rng(0)
    # Article-like junk scores high (0.6-0.8), link-heavy junk low (0.1-0.3); good pages of both score 0.7-1.
    first = np.repeat([True, False], 200)
    keep = np.tile(np.repeat([True, False], 100), 2)
    scores = np.where(keep, rng.uniform(0.7, 1.0, 400), np.where(first, rng.uniform(0.55, 0.75, 400), rng.uniform(0.1, 0.3, 400)))
    cut_first, cut_other = kind_thresholds(keep, scores, first, 0.9)
    assert 0.65 < cut_first <= 0.75 and 0.3 <= cut_other <= 0.7
    kept = np.where(first, scores >= cut_first, scores >= cut_other)
    assert kept[keep].mean() >= 0.9 and (~kept[~keep]).mean() > 0.9
