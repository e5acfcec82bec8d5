"""Dedup quality on a crawl with injected duplicates (tests/support/dedup_crawl.py), through the real asset graph.

The pipeline runs raw_shard → extracted_shard → curated_shard → minhash_signatures per shard, then
dedup_clusters, with the default dedup settings; `accuracy.dedup_accuracy` scores the clusters against
the crawl's truth.json. The bars are the ones the benchmark crawl is held to.
"""

import dagster as dg
import polars as pl
import pytest

from lm_assets.app.local_run import OFFLINE_RUN_CONFIG, run_shard_graph
from lm_assets.corpus.dedup.accuracy import dedup_accuracy, edit_rate_bin, language_group, tally
from lm_assets.definitions import defs as project_defs
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.dedup.assets import DedupSettings
from lm_assets.storage.layout import CLUSTERS_KEY, minhash_keys, stage_keys
from lm_assets.storage.store import Storage
from tests.support.dedup_crawl import build_dedup_crawl, crawl_digest

LANGUAGES = ("en", "zh")
LOW_EDIT_RATE = "0.01-0.02"


def pipeline_definitions(storage_root, landing_root) -> dg.Definitions:
    s3 = s3_resource_from_env()
    resources = {
        **project_defs.resources,
        "storage": StorageResource(root=str(storage_root), s3=s3),
        "landing": LandingResource(root=str(landing_root), s3=s3),
        "dedup": DedupSettings(),
    }
    return dg.Definitions(
        assets=project_defs.assets,
        asset_checks=project_defs.asset_checks,
        jobs=project_defs.jobs,
        resources=resources,
        executor=project_defs.executor,
    )


def dedup_tables(storage_root, shards: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(clusters with each document's url and lang, the curated texts dedup compared)."""
    store = Storage(str(storage_root))
    sketches = [store.read_parquet(minhash_keys(s)["sketches"], columns=["doc_id", "url", "lang"]) for s in shards]
    texts = [store.read_parquet(stage_keys("curated", s)["documents"], columns=["url", "text"]) for s in shards]
    return store.read_parquet(CLUSTERS_KEY).join(pl.concat(sketches), on="doc_id"), pl.concat(texts)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    out = tmp_path_factory.mktemp("dedup-crawl")
    truth = build_dedup_crawl(out, seed=0)
    return out, truth


@pytest.fixture(scope="module")
def deduplicated(crawl, tmp_path_factory):
    folder, truth = crawl
    storage_root = tmp_path_factory.mktemp("storage")
    shards = sorted(path.name for path in folder.glob("crawl-*.warc.gz"))
    instance = dg.DagsterInstance.ephemeral(settings={"python_logs": {"python_log_level": "WARNING"}})
    definitions = pipeline_definitions(storage_root, folder)
    results = run_shard_graph(definitions, instance, shards, OFFLINE_RUN_CONFIG, through_packing=False)
    clusters, texts = dedup_tables(storage_root, shards)
    return results, tally(clusters, texts, truth), dedup_accuracy(clusters, texts, truth)


def test_the_crawl_is_reproducible(crawl, tmp_path):
    folder, truth = crawl
    assert truth["counts"]["source_pages_by_lang"]["zh"] >= 100
    assert len({entry["url"] for entry in truth["injected"]}) == len(truth["injected"])
    build_dedup_crawl(tmp_path, seed=0)
    assert crawl_digest(tmp_path) == crawl_digest(folder)


def test_every_run_succeeds(deduplicated):
    results, _, _ = deduplicated
    assert [r.success for r in results] == [True] * len(results)


def test_enough_duplicates_reach_dedup(deduplicated):
    _, tallies, _ = deduplicated
    for lang in LANGUAGES:
        assert tallies[lang].docs >= 100, lang
        assert tallies[lang].exact.total >= 10, lang
        assert all(ratio.total >= 10 for ratio in tallies[lang].near.values()), (lang, tallies[lang].near)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_exact_duplicates_are_found(deduplicated, lang):
    _, tallies, figures = deduplicated
    assert figures[lang]["exact_recall"] >= 0.99, tallies[lang].missed_exact_groups


@pytest.mark.parametrize("lang", LANGUAGES)
def test_near_duplicates_with_few_edits_are_found(deduplicated, lang):
    _, tallies, figures = deduplicated
    assert figures[lang]["near_recall_by_edit_rate"][LOW_EDIT_RATE] >= 0.90, tallies[lang].missed_near_copies


@pytest.mark.parametrize("lang", LANGUAGES)
def test_few_false_removals(deduplicated, lang):
    _, tallies, figures = deduplicated
    assert figures[lang]["false_removal_rate"] <= 0.005, tallies[lang].false_removals


def test_chinese_near_recall_keeps_up_with_english(deduplicated):
    _, _, figures = deduplicated
    recall = {lang: figures[lang]["near_recall_by_edit_rate"][LOW_EDIT_RATE] for lang in LANGUAGES}
    assert recall["zh"] >= recall["en"] - 0.05, recall


# dedup_accuracy on a hand-made clusters table -----------------------------------------------

WORDS = "the quick brown fox jumps over the lazy dog while seven tall ships sail past a quiet harbour at dawn".split()


def clusters_table(rows: list[tuple[str, str, bool, str]]) -> pl.DataFrame:
    """(url, cluster_id, kept, lang) rows; the doc_id is the url."""
    urls, cluster_ids, kept, langs = zip(*rows, strict=True)
    return pl.DataFrame({"doc_id": urls, "cluster_id": cluster_ids, "kept": kept, "url": urls, "lang": langs})


HAND_MADE_CLUSTERS = clusters_table(
    [
        # en exact groups: a found (one cluster, one kept), b missed (both kept)
        ("a", "a", True, "en"), ("a1", "a", False, "en"),
        ("b", "b", True, "en"), ("b1", "b1", True, "en"),
        # en near copies: c1 found, d1 missed, e1 and e2 found (a sibling copy is kept), f1's original never arrived
        ("c", "c", True, "en"), ("c1", "c", False, "en"),
        ("d", "d", True, "en"), ("d1", "d1", True, "en"),
        ("e", "e2", False, "en"), ("e1", "e2", False, "en"), ("e2", "e2", True, "en"),
        ("f1", "f1", True, "en"),
        # en removals: g for an unrelated page (false), n1 for its natural twin, s for a near-identical page
        ("g", "h", False, "en"), ("h", "h", True, "en"),
        ("n1", "n2", False, "en"), ("n2", "n2", True, "en"),
        ("s", "t", False, "en"), ("t", "t", True, "en"),
        # zh (and ja): an exact group and a near copy found, a natural duplicate removed
        ("z", "z", True, "zh"), ("z1", "z", False, "zh"),
        ("y", "y1", False, "zh"), ("y1", "y1", True, "zh"),
        ("w", "v", False, "zh"), ("v", "v", True, "zh"),
        ("j", "j", True, "ja"),
    ]
)
HAND_MADE_TRUTH = {
    "injected": [
        {"url": "a1", "original_url": "a", "kind": "exact", "edit_rate": 0.0},
        {"url": "b1", "original_url": "b", "kind": "exact", "edit_rate": 0.0},
        {"url": "c1", "original_url": "c", "kind": "near", "edit_rate": 0.015},
        {"url": "d1", "original_url": "d", "kind": "near", "edit_rate": 0.01},
        {"url": "e1", "original_url": "e", "kind": "near", "edit_rate": 0.03},
        {"url": "e2", "original_url": "e", "kind": "near", "edit_rate": 0.06},
        {"url": "f1", "original_url": "f", "kind": "near", "edit_rate": 0.012},
        {"url": "z1", "original_url": "z", "kind": "exact", "edit_rate": 0.0},
        {"url": "y1", "original_url": "y", "kind": "near", "edit_rate": 0.019},
    ],
    "natural_duplicates": [["w", "v"]],
    "natural_near_pairs": [["n2", "n1", 0.45]],
}
HAND_MADE_TEXTS = {
    "g": " ".join(WORDS[:10]),
    "h": "completely different words about something else entirely here today",
    "n1": " ".join(WORDS[:12]),
    "n2": " ".join(WORDS[6:]),
    "s": " ".join(WORDS),
    "t": " ".join(WORDS[:-1] + ["dusk"]),
    "w": "这是一段中文文本",
    "v": "完全不同的内容",
}


def test_evaluate_on_a_hand_made_table():
    figures = dedup_accuracy(HAND_MADE_CLUSTERS, HAND_MADE_TEXTS, HAND_MADE_TRUTH)
    assert figures == {
        "en": {
            "docs": 18,
            "exact_recall": 0.5,
            "near_recall_by_edit_rate": {"0.01-0.02": 0.5, "0.02-0.04": 1.0, "0.04-0.06": 1.0},
            "false_removal_rate": 1 / 18,
        },
        "zh": {
            "docs": 7,
            "exact_recall": 1.0,
            "near_recall_by_edit_rate": {"0.01-0.02": 1.0, "0.02-0.04": None, "0.04-0.06": None},
            "false_removal_rate": 0.0,
        },
    }


def test_tally_lists_the_misses():
    texts = pl.DataFrame({"url": list(HAND_MADE_TEXTS), "text": list(HAND_MADE_TEXTS.values())})
    tallies = tally(HAND_MADE_CLUSTERS, texts, HAND_MADE_TRUTH)
    assert tallies["en"].missed_exact_groups == [["b", "b1"]]
    assert [item["url"] for item in tallies["en"].missed_near_copies] == ["d1"]
    (false_removal,) = tallies["en"].false_removals
    assert (false_removal.url, false_removal.kept_url, false_removal.jaccard) == ("g", "h", 0.0)


def test_language_groups_and_edit_rate_bins():
    langs = ("en", "zh", "zh-Hant", "ja", "de", None)
    assert [language_group(lang) for lang in langs] == ["en", "zh", "zh", "zh", "en", "en"]
    rates = (0.005, 0.01, 0.0199, 0.02, 0.04, 0.06, 0.061)
    bins = [None, "0.01-0.02", "0.01-0.02", "0.02-0.04", "0.04-0.06", "0.04-0.06", None]
    assert [edit_rate_bin(rate) for rate in rates] == bins
