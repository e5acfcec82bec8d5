"""Curation's histograms of the scores it decides on: fixed bins, counts that add up, batch by batch and
shard by shard; every column a curated table carries is described."""

from __future__ import annotations

import functools
import io

import polars as pl
import pytest
from PIL import Image

from lm_assets.corpus.columns import column_description
from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
from lm_assets.corpus.curation.histograms import (
    COLUMNS,
    LANG_SCORE,
    PANEL_WIDTH,
    QUALITY_SCORE,
    TITLE_SIZE,
    Histogram,
    count_edges,
    figure_png,
    figure_title,
    from_json,
    linear_edges,
    summed,
    to_json,
)
from lm_assets.corpus.curation.pipeline import CurationConfig, curate_batches
from lm_assets.corpus.curation.rules import preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.ingest.readers import read_shard
from tests.support.dedup_crawl import SAMPLE_CRAWL

SHARDS = sorted(SAMPLE_CRAWL.glob("crawl-*.warc.gz"))[:2]


@functools.cache
def extracted(shard_index: int) -> pl.DataFrame:
    return extract_documents(read_shard(SHARDS[shard_index]).documents, ExtractConfig()).kept


@functools.cache
def curated(shard_index: int, policy: str, quality_preset: str = "lm_assets", batch_rows: int = 50):
    docs = extracted(shard_index)
    config = CurationConfig(quality=preset(quality_preset), policy=policy,
                            toxicity=ToxicityConfig(backend="profanity_check"))  # fmt: skip
    histograms: dict[str, Histogram] = {}
    result = curate_batches((docs.slice(i, batch_rows) for i in range(0, docs.height, batch_rows)), config, histograms)
    return result, histograms


@pytest.mark.parametrize("policy", ["rules", "classifier"])
def test_binned_counts_add_up_to_the_documents_each_decision_kept_and_dropped(policy):
    result, histograms = curated(0, policy)
    stats, dropped = result.stats, result.dropped
    langid = histograms[LANG_SCORE]
    langid_drops = dropped.filter(pl.col("stage") == "langid").height
    assert (sum(langid.kept), sum(langid.dropped)) == (stats["langid"]["docs_out"], langid_drops)
    # The quality decision: the rules', or with a classifier the classifier step's.
    decision = stats.get("classifier", stats["quality"])
    words = histograms["q_word_count"]  # never null
    quality_drops = dropped.filter(pl.col("stage").is_in(["rules", "classifier"])).height
    assert (sum(words.kept), sum(words.dropped)) == (decision["docs_out"], quality_drops) and quality_drops > 0
    if policy == "rules":
        assert QUALITY_SCORE not in histograms
    else:
        classifier = histograms[QUALITY_SCORE]
        assert sum(classifier.kept) == decision["docs_out"]
        assert sum(classifier.dropped) == decision["docs_in"] - decision["docs_out"]
        assert classifier.marks == sorted(set(classifier.marks)) and len(classifier.marks) >= 1
    # Either way the minimum length drops: no kept document lies below 50 words.
    assert sum(words.kept[: words.edges.index(50.0)]) == 0 < sum(words.dropped[: words.edges.index(50.0)])


def test_counts_taken_batch_by_batch_are_those_of_the_whole_shard():
    _, in_batches = curated(0, "both", batch_rows=37)
    _, whole = curated(0, "both", batch_rows=10_000)
    assert to_json(in_batches) == to_json(whole)


def test_bins_follow_the_config_not_the_data_and_the_thresholds_are_marked():
    _, first = curated(0, "rules", "published")
    _, second = curated(1, "rules", "published")
    for signal in first:
        assert first[signal].edges == second[signal].edges
    # A share's bins run to three times its threshold, which falls on an edge; counts on the 1-2-3-5 series.
    assert first["q_fw_char_dup_ratio"].edges == linear_edges(0.03, 30) and first["q_fw_char_dup_ratio"].marks == [0.01]
    assert first["q_word_count"].marks == [50, 100, 100_000, 150_000]
    assert first["q_word_count"].edges == count_edges([50, 100, 100_000, 150_000])
    assert first["q_word_count"].edges[:8] == [0, 1, 2, 3, 5, 7.5, 10, 20]
    assert first["q_c4_sentences"].rule == "c4: min_sentences 5"
    assert first["q_fw_char_dup_ratio"].position(0.01) == 10
    assert first["q_word_count"].position(50) == first["q_word_count"].edges.index(50)
    # Flag rules (lorem ipsum, curly brackets) compare nothing to a threshold: no histogram.
    assert "q_c4_lorem_ipsum" not in first and "q_c4_curly_bracket" not in first


def test_the_histograms_of_all_shards_are_the_sum_of_each_shards():
    shards = [from_json(to_json(curated(i, "classifier")[1])) for i in range(2)]
    total, left_out = summed(shards)
    assert left_out == 0 and set(total) == set(shards[0])
    for signal, histogram in total.items():
        assert histogram.kept == [a + b for a, b in zip(shards[0][signal].kept, shards[1][signal].kept)]
        assert histogram.dropped == [a + b for a, b in zip(shards[0][signal].dropped, shards[1][signal].dropped)]
    # A shard binned otherwise (curated under other thresholds) is left out, not added bin by bin.
    other = {"q_word_count": Histogram("q_word_count", "", count_edges([5]), [5.0])}
    with_other, left_out = summed([*shards, other])
    assert left_out == 1 and with_other["q_word_count"].kept == total["q_word_count"].kept


def test_the_figure_is_a_png_whose_titles_read_where_it_is_shown_scaled():
    png = figure_png(curated(0, "classifier")[1], "a shard")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    # Shown scaled to fit a column of the UI, a title's type keeps at least a hundredth of the figure's
    # width (12-point type over four panels a row, 5.2 inches each, kept 0.8 %).
    assert TITLE_SIZE / 72 / (PANEL_WIDTH * COLUMNS) >= 0.01 and COLUMNS <= 3
    with Image.open(io.BytesIO(png)) as image:
        assert image.width == int(PANEL_WIDTH * COLUMNS * 72)
        # Whole inside the UI's metadata dialog at a 1600-pixel window (about 1,280 pixels of content).
        assert image.width <= 1200


def test_each_panel_title_names_the_step_whose_documents_it_counts():
    histograms = curated(0, "classifier")[1]
    words, lang = histograms["q_word_count"], histograms[LANG_SCORE]
    title = figure_title(words, 3).splitlines()
    assert title[:3] == ["q_word_count", "documents reaching the quality rules:",
                         f"kept {sum(words.kept):,} · dropped {sum(words.dropped):,} (drawn ×3)"]
    assert all(len(line) <= 52 for line in title)  # the rule wrapped to the panel's width
    assert figure_title(lang, 1).splitlines()[1:3] == [
        "documents reaching language ID:", f"kept {sum(lang.kept):,} · dropped {sum(lang.dropped):,}"]
    assert figure_title(histograms[QUALITY_SCORE], 1).splitlines()[1] == "documents reaching the classifier:"


@pytest.mark.parametrize("quality_preset", ["lm_assets", "published"])
def test_every_column_of_a_curated_shard_and_its_extracted_and_raw_tables_is_described(quality_preset):
    result, _ = curated(0, "classifier", quality_preset)
    raw = read_shard(SHARDS[0]).documents
    columns = set(raw.columns) | set(extracted(0).columns) | set(result.kept.columns)
    undescribed = sorted(name for name in columns if not column_description(name))
    assert not undescribed
    assert column_description("q_dup_7gram_frac") == (
        "Share of the text's characters covered by 7-grams occurring more than once."
    )
