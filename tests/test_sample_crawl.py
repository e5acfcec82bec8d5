"""Materialize the partitioned graph on the shipped sample crawl and check it against expected.json."""

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from lm_assets.corpus.pii import find_pii
from lm_assets.defs.curated import curated_shard, extracted_shard
from lm_assets.defs.expectations import curated_expectations
from lm_assets.defs.raw import raw_shard
from lm_assets.defs.resources import LandingResource, StorageResource, s3_resource_from_env

CRAWL = Path(__file__).resolve().parents[1] / "data" / "sample-crawl"
EXPECTED = json.loads((CRAWL / "expected.json").read_text())
SHARDS = sorted(EXPECTED["shards"])
RUN_CONFIG = {"ops": {"curated_shard": {"config": {"toxicity": {"backend": "profanity_check"}}}}}


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", SHARDS)
    s3 = s3_resource_from_env()
    resources = {"storage": StorageResource(root=str(root), s3=s3), "landing": LandingResource(root=str(CRAWL), s3=s3)}
    results = {
        shard: dg.materialize(
            [raw_shard, extracted_shard, curated_shard, curated_expectations],
            partition_key=shard, instance=instance, resources=resources, run_config=RUN_CONFIG,
        )
        for shard in SHARDS
    }
    return root, results


def table(root: Path, stage: str, name: str) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(root / stage / shard / f"{name}.parquet") for shard in SHARDS])


def urls(category) -> list[str]:
    items = EXPECTED["categories"][category]
    return [i if isinstance(i, str) else i["url"] for i in items]


def test_every_run_succeeds_and_every_check_passes(materialized):
    _, results = materialized
    for shard, result in results.items():
        assert result.success
        evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert len(evaluations) == 3 + 4 + 6 + 1
        failed = [(e.asset_key.path[-1], e.check_name) for e in evaluations if not e.passed]
        assert failed == [], shard


@pytest.mark.parametrize("shard", SHARDS)
def test_raw_counts_match_the_crawl(materialized, shard):
    root, _ = materialized
    expected = EXPECTED["shards"][shard]
    summary = json.loads((root / "raw" / shard / "summary.json").read_text())
    assert summary["records"] == expected["records"]
    dropped = pl.read_parquet(root / "raw" / shard / "dropped.parquet")
    reasons = dict(dropped.group_by("reason").len().iter_rows())
    assert reasons.pop("not_a_document:warcinfo") == 1
    assert reasons.pop("not_a_document:request") == len(expected["requests"])
    assert reasons.pop("http_status:404") == 1 and reasons.pop("http_status:301") == 1
    assert sum(v for k, v in reasons.items() if k.startswith("content_type:")) == len(expected["non_html"])
    quarantine = pl.read_parquet(root / "raw" / shard / "quarantine.parquet")
    docs = pl.read_parquet(root / "raw" / shard / "documents.parquet")
    assert docs.height == expected["counts"]["html_ok"] - len(expected["invalid_utf8"])
    assert sorted(quarantine["url"].drop_nulls().to_list()) == sorted(expected["invalid_utf8"] + (
        [expected["corrupt"]["url"]] if expected["corrupt"] else []
    ))
    if expected["corrupt"]:
        corrupt = quarantine.filter(pl.col("reason") == "truncated_record")
        assert corrupt["byte_offset"].to_list() == [expected["corrupt"]["offset"]]


def test_gbk_page_is_decoded(materialized):
    root, _ = materialized
    extracted = table(root, "extracted", "documents")
    (gbk,) = EXPECTED["categories"]["encodings"]["gbk"]
    gbk_url = gbk["url"]
    text = extracted.filter(pl.col("url") == gbk_url)["text"][0]
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in text) > 100


def test_curation_outcomes(materialized):
    root, _ = materialized
    curated = table(root, "curated", "documents")
    kept = set(curated["url"])
    assert not kept & set(urls("low_quality"))
    mostly_toxic_en = [t["url"] for t in EXPECTED["categories"]["toxic"] if t["severity"] == "mostly" and t["lang"] == "en"]
    assert mostly_toxic_en and not kept & set(mostly_toxic_en)
    assert set(curated["lang"].unique()) == {"en", "zh"}
    assert curated.filter(pl.col("lang") == "zh").height > 50 and curated.filter(pl.col("lang") == "en").height > 50


def test_pii_is_redacted_and_negatives_are_kept(materialized):
    root, _ = materialized
    curated = table(root, "curated", "documents").select("url", "text")
    text_by_url = dict(curated.iter_rows())
    pages = [p for p in EXPECTED["categories"]["pii"] if p["url"] in text_by_url]
    assert pages, "some PII pages survive curation"
    for page in pages:
        text = text_by_url[page["url"]]
        for item in page["items"]:
            assert item["value"] not in text
        for negative in page.get("negatives", []):
            assert negative["value"] in text, negative
    assert all(not find_pii(t) for t in curated["text"].to_list())


def test_every_record_is_accounted_for(materialized):
    root, _ = materialized
    records = sum(json.loads((root / "raw" / s / "summary.json").read_text())["records"] for s in SHARDS)
    kept = table(root, "curated", "documents").height
    dropped = sum(table(root, stage, "dropped").height for stage in ("raw", "extracted", "curated"))
    quarantined = table(root, "raw", "quarantine").height
    assert records == EXPECTED["totals"]["warcinfo"] + EXPECTED["totals"]["request"] + 376 + 12 + 3 + 3 + 1
    assert records == kept + dropped + quarantined
