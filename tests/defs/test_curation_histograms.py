"""curated_shard's quality histograms: inline charts under the UI's limit, the whole figure as a PNG beside
the shard's tables and in its metadata, the binned counts as JSON beside them; every column described."""

from __future__ import annotations

import base64
import json
import re
import shutil
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

import dagster as dg
import polars as pl

from lm_assets.charts import COLORS, INLINE_LIMIT, WIDTH
from lm_assets.corpus.curation.histograms import (
    LANG_SCORE,
    QUALITY_SCORE,
    Histogram,
    count_edges,
    from_json,
    linear_edges,
)
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import curated_shard, curation_summary, extracted_shard
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.reporting.histograms import inline_histogram
from tests.support.dedup_crawl import SAMPLE_CRAWL

SHARD = "crawl-00000.warc.gz"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CURATED_CONFIG = {"quality_policy": "both"}
RUN_CONFIG = {"ops": {"curated_shard": {"config": CURATED_CONFIG}}}


def test_curated_shard_shows_its_histograms_inline_and_whole_beside_its_tables(tmp_path):
    landing, storage = tmp_path / "landing", tmp_path / "storage"
    landing.mkdir()
    shutil.copy(SAMPLE_CRAWL / SHARD, landing / SHARD)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", [SHARD])
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard], partition_key=SHARD, instance=instance, run_config=RUN_CONFIG,
        resources={"storage": StorageResource(root=str(storage)), "landing": LandingResource(root=str(landing)),
                   "toxicity": ToxicityResource(backend="profanity_check")},
    )
    assert result.success
    metadata = result.asset_materializations_for_node("curated_shard")[0].metadata
    folder = storage / "curated" / SHARD
    stored = from_json(json.loads((folder / "quality_histograms.json").read_text()))
    dropped = pl.read_parquet(folder / "dropped.parquet")

    # One inline chart per signal whose rule dropped something here, and for language ID and the classifier.
    inline = {key.removeprefix("hist/"): value.value for key, value in metadata.items() if key.startswith("hist/")}
    fired = set(dropped.filter(pl.col("stage") == "rules")["reason"])
    assert set(inline) == {LANG_SCORE, QUALITY_SCORE} | {s for s, h in stored.items() if fired & set(h.reasons)}
    assert "q_word_count" in inline and len(inline) >= 4
    for signal, markdown in inline.items():
        assert markdown.startswith(f"![{signal}](data:image/svg+xml,") and len(markdown) <= INLINE_LIMIT < 1000
        caption = markdown.split("\n\n")[1]
        kept, dropped_count = sum(stored[signal].kept), sum(stored[signal].dropped)
        assert f"{kept + dropped_count:,} documents · " in caption and "\n" not in caption
        assert f"kept {kept:,}" in caption and f"dropped {dropped_count:,}" in caption
    assert inline[QUALITY_SCORE].split("\n\n")[1].startswith("classifier: below_threshold")
    # Each panel says which step's documents it counts, as their totals differ.
    assert "· at language ID: " in inline[LANG_SCORE] and "· at the classifier: " in inline[QUALITY_SCORE]
    assert "· at the quality rules: " in inline["q_word_count"] and "hist_legend" in metadata
    # The rules' panel splits its dropped documents into its rules' and the rest (other rules, the classifier),
    # so that it agrees with the steps table, which counts each drop at its step.
    by_rule = dropped.filter(pl.col("reason").is_in(stored["q_word_count"].reasons)).height
    later = sum(stored["q_word_count"].dropped) - by_rule
    assert f"({by_rule:,} by its rule{'s' if len(stored['q_word_count'].reasons) > 1 else ''}, {later:,} by other rules or at later steps)" in inline["q_word_count"]
    # The binned counts are those of the documents each step kept and dropped.
    assert sum(stored[LANG_SCORE].dropped) == dropped.filter(pl.col("stage") == "langid").height
    quality_drops = dropped.filter(pl.col("stage").is_in(["rules", "classifier"])).height
    assert sum(stored["q_word_count"].dropped) == quality_drops

    # The whole figure: a PNG beside the tables, its path, and embedded.
    png = (folder / "quality_histograms.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    assert Path(metadata["quality_histograms_png"].value) == folder / "quality_histograms.png"
    image = metadata["quality_histograms"].value
    embedded = re.fullmatch(r"!\[[^\]]+\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", image)
    assert embedded and base64.b64decode(embedded.group(1)) == png

    # Every column of the stored table has a description.
    columns = metadata["dagster/column_schema"].value.columns
    assert [c.name for c in columns] == pl.read_parquet(folder / "documents.parquet").columns
    assert all(c.description and c.description.strip() for c in columns), [c.name for c in columns if not c.description]


def test_the_summary_sums_every_curated_shard(tmp_path):
    landing, storage = tmp_path / "landing", tmp_path / "storage"
    landing.mkdir()
    shards = ["crawl-00000.warc.gz", "crawl-00001.warc.gz"]
    for shard in shards:
        shutil.copy(SAMPLE_CRAWL / shard, landing / shard)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", shards)
    resources = {"storage": StorageResource(root=str(storage)), "landing": LandingResource(root=str(landing)),
                   "toxicity": ToxicityResource(backend="profanity_check")}
    for shard in shards:
        assert dg.materialize([raw_shard, extracted_shard, curated_shard], partition_key=shard, instance=instance,
                              run_config=RUN_CONFIG, resources=resources).success  # fmt: skip
    result = dg.materialize([curation_summary], instance=instance, resources=resources,
                            selection=[curation_summary])  # fmt: skip
    assert result.success
    metadata = result.asset_materializations_for_node("curation_summary")[0].metadata
    per_shard = [from_json(json.loads((storage / "curated" / s / "quality_histograms.json").read_text())) for s in shards]
    total = from_json(json.loads((storage / "curation_summary" / "quality_histograms.json").read_text()))
    for signal, histogram in total.items():
        assert histogram.kept == [sum(c) for c in zip(*(h[signal].kept for h in per_shard))]
        assert histogram.dropped == [sum(c) for c in zip(*(h[signal].dropped for h in per_shard))]
    extracted = sum(pl.read_parquet(storage / "extracted" / s / "documents.parquet").height for s in shards)
    assert metadata["shards"].value == 2 and metadata["documents"].value == extracted
    assert (storage / "curation_summary" / "quality_histograms.png").read_bytes().startswith(PNG_MAGIC)
    inline = [key for key in metadata if key.startswith("hist/")]
    assert {f"hist/{LANG_SCORE}", f"hist/{QUALITY_SCORE}", "hist/q_word_count"} <= set(inline)
    assert all(len(metadata[key].value) <= INLINE_LIMIT for key in inline)
    drops = pl.concat([pl.read_parquet(storage / "curated" / s / "dropped.parquet") for s in shards])
    assert f"| langid:{drops.filter(pl.col('stage') == 'langid')['reason'].mode()[0]} |" in metadata["drop_reasons"].value


def test_the_threshold_is_drawn_where_it_falls_on_the_axis():
    share = Histogram("q_hash_word_ratio", "gopher_quality: hash_word_ratio 0.1", linear_edges(0.3, 30), [0.1],
                      kept=[(7 * i) % 13 for i in range(30)], dropped=[(5 * i) % 11 for i in range(30)])  # fmt: skip
    counts = Histogram("q_word_count", "gopher_quality: min_doc_words 50", count_edges([10]), [50.0],
                       kept=[0] * 9 + [4, 9], dropped=[3, 1, 0, 0, 2, 5, 8, 1, 1, 0, 0])  # fmt: skip
    # Drawn bin by bin: 0.1 is the 10th edge of 30, 50 the 9th of 11.
    for histogram, x in ((share, round(10 / 30 * WIDTH)), (counts, round(9 / 11 * WIDTH))):
        markdown = inline_histogram(histogram, "caption")
        assert f"%3Cpath%20d='M{x},0V64'" in markdown and len(markdown) < 1000


def test_threshold_pairs_are_told_apart_and_each_panel_says_what_it_counts():
    from lm_assets.corpus.curation.histograms import quality_histograms
    from lm_assets.corpus.curation.rules import preset
    from lm_assets.reporting.histograms import inline_histogram, mark_styles, thresholds_legend

    words = {h.signal: h for h in quality_histograms(preset("lm_assets"))}["q_word_count"]
    assert words.mark_labels == ["min_doc_words 50", "min_doc_chars_cjk 75", "max_doc_words 100,000",
                                 "max_doc_chars_cjk 150,000"]
    # The word-count pair and the zh/ja/ko character pair: two dash patterns, and the caption says which.
    assert mark_styles(words) == [0, 1, 0, 1]
    assert thresholds_legend(words) == "gopher_quality: dashed doc_words 50–100,000; dotted doc_chars_cjk 75–150,000"
    assert words.population == "the quality rules"
    word_length = {h.signal: h for h in quality_histograms(preset("lm_assets"))}["q_mean_word_length"]
    assert word_length.population == "the quality rules, zh/ja/ko left out"
    words.kept = [(7 * i) % 13 for i in range(len(words.kept))]
    words.dropped = [i % 2 for i in range(len(words.kept))]
    markdown = inline_histogram(words, "caption")
    assert len(markdown) <= INLINE_LIMIT and "stroke-dasharray='1,2'" in markdown and "stroke-dasharray='3'" in markdown


def test_thresholds_one_to_a_language_are_named_in_order_along_the_axis():
    from lm_assets.corpus.curation.histograms import score_histogram
    from lm_assets.reporting.histograms import mark_styles, thresholds_legend

    # The classifier's rule lists its languages as its config does; its lines lie in order of their cuts.
    classifier = score_histogram(QUALITY_SCORE, "classifier: below_threshold others 0.401, en 0.38, zh 0.489",
                                 [("others", 0.401), ("en", 0.38), ("zh", 0.489)], "the classifier")  # fmt: skip
    assert mark_styles(classifier) == [0, 0, 0]  # one dash pattern: a pattern per line would not fit in place
    assert thresholds_legend(classifier) == (
        "classifier: below_threshold en 0.38, others 0.401, zh 0.489 (dashed, left to right)")


def test_inline_histograms_tick_their_axes_at_round_values():
    from lm_assets.corpus.curation.histograms import quality_histograms
    from lm_assets.corpus.curation.rules import preset
    from lm_assets.reporting.histograms import inline_histogram, value_ticks

    histograms = {h.signal: h for h in quality_histograms(preset("lm_assets"))}
    words, share = histograms["q_word_count"], histograms["q_alpha_words_ratio"]
    # Word counts binned as a log scale: 0 and powers of ten evenly apart; a share at round values.
    assert [label for _, label in value_ticks(words)] == ["0", "1k", "1M"]
    assert [label for _, label in value_ticks(share)] == ["0", "0.5", "1"]
    words.kept = [0] * 10 + [2, 1, 1, 3, 21, 9, 45, 28] + [0] * (len(words.kept) - 18)
    words.dropped = [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 4, 0, 0, 1, 0, 3, 1] + [0] * (len(words.kept) - 18)
    markdown = inline_histogram(words, "caption")
    svg = ET.fromstring(urllib.parse.unquote(re.search(r"data:image/svg\+xml,([^)]*)", markdown).group(1)))
    labels = [(text.text, text.get("fill")) for text in svg.iter("{http://www.w3.org/2000/svg}text")]
    # The tallest kept bin's count (45), the x axis's round values, the tallest dropped bin's count (4) in red.
    assert len(markdown) <= INLINE_LIMIT
    assert labels == [("45", None), ("0", None), ("1k", None), ("1M", None), ("4", COLORS["red"])]
