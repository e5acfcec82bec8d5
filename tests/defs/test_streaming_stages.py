"""raw_shard and extracted_shard on a shard many batches long: they stream it, and publish what the whole
shard read at once gives. A run of several shards: each keeps its own materialization and checks."""

from __future__ import annotations

import io
import random

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
from lm_assets.corpus.ingest.readers import BATCH_ROWS, read_shard
from lm_assets.defs.common.partitions import partition_range_tags
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import extracted_shard
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.storage.layout import raw_keys, stage_keys
from lm_assets.storage.store import DOCUMENT_ROW_GROUP_ROWS, Storage
from tests.support.warc_builder import WarcBuilder, page

PAGES = 2 * DOCUMENT_ROW_GROUP_ROWS + 100


def test_a_shard_of_several_batches_is_streamed_and_accounted_exactly(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    builder = WarcBuilder().warcinfo()
    for i in range(PAGES):
        body = "<p></p>" if i % 97 == 0 else f"<p>Page {i} of the long shard holds a sentence about item {i}.</p>"
        builder.response(f"https://long.example/{i}", page(f"Item {i}", body))
    shard = builder.write(landing / "long.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", [shard.name])
    resources = {"storage": StorageResource(root=str(tmp_path / "storage")), "landing": LandingResource(root=str(landing)),
                 "toxicity": ToxicityResource(backend="profanity_check")}
    result = dg.materialize([raw_shard, extracted_shard], partition_key=shard.name, instance=instance, resources=resources)
    assert result.success
    meta = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("raw_shard")}
    meta |= {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("extracted_shard")}
    assert meta["raw_shard"]["batches"].value == -(-PAGES // BATCH_ROWS)  # read BATCH_ROWS at a time
    assert meta["extracted_shard"]["batches"].value == 3  # a row group at a time
    assert meta["raw_shard"]["documents_out"].value == PAGES

    store = Storage(str(tmp_path / "storage"))
    layout = pq.ParquetFile(store.local_path(raw_keys(shard.name)["documents"])).metadata
    assert [layout.row_group(i).num_rows for i in range(layout.num_row_groups)] == [DOCUMENT_ROW_GROUP_ROWS] * 2 + [
        PAGES - 2 * DOCUMENT_ROW_GROUP_ROWS
    ]
    whole = read_shard(shard)
    assert store.read_parquet(raw_keys(shard.name)["documents"]).equals(whole.documents)
    extracted = extract_documents(whole.documents, ExtractConfig())
    assert store.read_parquet(stage_keys("extracted", shard.name)["documents"]).equals(extracted.kept)
    assert store.read_parquet(stage_keys("extracted", shard.name)["dropped"]).equals(extracted.dropped)
    assert extracted.dropped.height == len(range(0, PAGES, 97))
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["conservation"] and checks["no_control_chars"] and checks["non_empty"]
    assert pl.read_parquet(store.local_path(raw_keys(shard.name)["dropped"])).height == 1  # the warcinfo


def test_a_page_over_the_extraction_budget_is_quarantined_and_the_shard_still_balances(tmp_path):
    from lm_assets.defs.curation.assets import curated_shard
    from lm_assets.storage.layout import quarantine_key

    landing = tmp_path / "landing"
    landing.mkdir()
    deep = "<div>" * 20_000 + "<p>Deep text.</p>" + "</div>" * 20_000
    builder = WarcBuilder().warcinfo()
    for i in range(6):
        body = deep if i == 2 else f"<p>Page {i} explains how the harbour works, in full sentences, for readers.</p>" * 8
        builder.response(f"https://site.example/{i}", page(f"Page {i}", body))
    shard = builder.write(landing / "deep.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", [shard.name])
    config = {"ops": {"extracted_shard": {"config": {"time_budget_s": 0.05}},
                      "curated_shard": {"config": {"quality_policy": "rules"}}}}
    resources = {"storage": StorageResource(root=str(tmp_path / "storage")), "landing": LandingResource(root=str(landing)),
                 "toxicity": ToxicityResource(backend="profanity_check")}
    result = dg.materialize([raw_shard, extracted_shard, curated_shard], partition_key=shard.name, instance=instance,
                            resources=resources, run_config=config)  # fmt: skip
    assert result.success
    store = Storage(str(tmp_path / "storage"))
    held = store.read_parquet(quarantine_key("extracted", shard.name))
    assert held.select("url", "reason").rows() == [("https://site.example/2", "timeout")]
    assert store.read_parquet(stage_keys("extracted", shard.name)["documents"]).height == 5
    checks = {(e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()}
    assert checks[("extracted_shard", "conservation")] and checks[("curated_shard", "shard_conservation")]
    meta = result.asset_materializations_for_node("extracted_shard")[0].metadata
    assert meta["quarantined"].value == 1 and meta["timeouts"].value == 1
    # raw_shard's preview of the first documents does not parse it either
    raw_preview = result.asset_materializations_for_node("raw_shard")[0].metadata["preview"].value
    assert "(not parsed: its elements nest over 10,000 deep)" in raw_preview and "Page 3 explains" in raw_preview


def test_curated_shard_streams_its_batches_into_the_bytes_one_batch_gives(tmp_path, monkeypatch):
    from lm_assets.defs.curation import assets as curation_assets
    from lm_assets.defs.curation.assets import curated_shard

    landing = tmp_path / "landing"
    landing.mkdir()
    builder = WarcBuilder().warcinfo()
    for i in range(70):
        prose = "".join(f"<p>{harbour_prose(i * 10 + j)}</p>" for j in range(4))
        body = "<p>Too short.</p>" if i % 9 == 0 else prose + f"<p>Write to clerk{i}@harbour.example.</p>"
        builder.response(f"https://port.example/{i}", page(f"Page {i}", body))
    shard = builder.write(landing / "port.warc.gz")
    tables, metadata = {}, {}
    for batch_rows in (16, 10_000):
        monkeypatch.setattr(curation_assets, "CURATION_BATCH_ROWS", batch_rows)
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("shards", [shard.name])
        root = tmp_path / f"storage-{batch_rows}"
        resources = {"storage": StorageResource(root=str(root)), "landing": LandingResource(root=str(landing)),
                     "toxicity": ToxicityResource(backend="profanity_check")}
        result = dg.materialize([raw_shard, extracted_shard, curated_shard], partition_key=shard.name,
                                instance=instance, resources=resources)
        assert result.success
        checks = {(e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()}
        assert checks.pop(("curated_shard", "language_share")) is False  # no Chinese, below its 5 % bound
        assert all(checks.values()) and ("curated_shard", "pii_residue") in checks
        metadata[batch_rows] = result.asset_materializations_for_node("curated_shard")[0].metadata
        keys = stage_keys("curated", shard.name)
        tables[batch_rows] = {name: Storage(str(root)).local_path(keys[name]).read_bytes()
                              for name in ("documents", "dropped")}  # fmt: skip
    assert tables[16] == tables[10_000]
    assert metadata[16]["batches"].value == -(-70 // 16) and metadata[10_000]["batches"].value == 1
    kept = pl.read_parquet(io.BytesIO(tables[16]["documents"]))
    assert 0 < kept.height < 70 and metadata[16]["documents_out"].value == kept.height
    assert not kept["text"].str.contains("@harbour.example").any()  # redacted, and the residue check passed
    for name in ("language_shares", "text_length_histogram", "preview"):
        assert metadata[16][name].value == metadata[10_000][name].value, name


NOUNS = ("ships", "cranes", "tides", "pilots", "cargo", "berths", "tugs", "ropes", "clerks", "gulls", "storms", "piers",
         "engines", "ledgers", "sailors", "lanterns", "barges", "harbours", "charts", "winches")
VERBS = ("follow", "outlast", "guide", "weigh", "shelter", "count", "repair", "watch", "carry", "load")


def harbour_prose(seed: int) -> str:
    """A paragraph of plain sentences that differ from seed to seed, so the rules keep it."""
    draw = random.Random(seed)
    return " ".join(
        f"In the {draw.choice(NOUNS)} district, {draw.choice(NOUNS)} {draw.choice(VERBS)} the {draw.choice(NOUNS)} "
        f"and {draw.choice(VERBS)} {draw.choice(NOUNS)} with {draw.choice(NOUNS)}."
        for _ in range(5)
    )


def test_a_run_of_several_shards_keeps_each_shards_materialization_and_checks(tmp_path):
    from lm_assets.defs.curation.assets import curated_shard
    from lm_assets.defs.curation.expectations import curated_expectations
    from lm_assets.defs.decontam.assets import decontaminated_shard
    from lm_assets.defs.dedup.assets import (
        DedupSettings,
        dedup_clusters,
        dedup_edges,
        deduplicated_shard,
        minhash_signatures,
    )
    from lm_assets.defs.tokens.assets import tokenized_shard, tokenizer

    landing = tmp_path / "landing"
    landing.mkdir()
    shards = []
    for number, pages in enumerate((3, 5, 8)):
        builder = WarcBuilder().warcinfo()
        for i in range(pages):
            text = "".join(f"<p>{harbour_prose(number * 100 + i * 10 + j)}</p>" for j in range(6))
            builder.response(f"https://s{number}.example/{i}", page(f"Page {i}", text))
        shards.append(builder.write(landing / f"s{number}.warc.gz").name)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", shards)
    config = {"ops": {"curated_shard": {"config": {"quality_policy": "rules"}}}}
    resources = {"storage": StorageResource(root=str(tmp_path / "storage")), "landing": LandingResource(root=str(landing)),
                 "dedup": DedupSettings(), "toxicity": ToxicityResource(backend="profanity_check")}  # fmt: skip
    every_shard = partition_range_tags(shards[0], shards[-1])
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard, curated_expectations, minhash_signatures], instance=instance,
        resources=resources, run_config=config, tags=every_shard,
    )
    assert result.success
    expectations = [e for e in result.get_asset_check_evaluations() if e.check_name == "curated_expectations"]
    assert [(e.passed, e.metadata["shards"].value) for e in expectations] == [(True, 3)]
    assert set(expectations[0].metadata["by_shard"].value) == set(shards)
    for asset, count in (("raw_shard", "documents_out"), ("extracted_shard", "documents_out"), ("curated_shard", "documents_in"),
                         ("minhash_signatures", "documents")):  # fmt: skip
        for shard, pages in zip(shards, (3, 5, 8), strict=True):
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[shard]), limit=1
            ).records
            expected = pages if asset != "minhash_signatures" else Storage(str(tmp_path / "storage")).row_count(
                stage_keys("curated", shard)["documents"])
            assert records[0].asset_materialization.metadata[count].value == expected, (asset, shard)
    evaluations = [e for e in result.get_asset_check_evaluations() if e.partition is not None]
    by_shard = {(e.asset_key.path[-1], e.check_name, e.partition): e.passed for e in evaluations}
    assert all(by_shard[("curated_shard", "shard_conservation", shard)] for shard in shards)
    assert all(by_shard[("raw_shard", "conservation", shard)] for shard in shards)
    summary = [e for e in result.get_asset_check_evaluations() if e.partition is None and e.check_name == "conservation"]
    assert summary and all(e.passed and e.metadata["shards"].value == 3 for e in summary)
    store = Storage(str(tmp_path / "storage"))
    kept_and_dropped = [store.row_count(stage_keys("curated", s)["documents"]) + store.row_count(stage_keys("curated", s)["dropped"])
                        for s in shards]  # fmt: skip
    assert kept_and_dropped == [3, 5, 8]
    assert sum(store.row_count(stage_keys("curated", s)["documents"]) for s in shards) > 0

    for bands in instance.get_dynamic_partitions("dedup_bands"):
        assert dg.materialize([dedup_edges], instance=instance, resources=resources, partition_key=bands).success
    assert dg.materialize([dedup_clusters], instance=instance, resources=resources).success
    after_dedup = dg.materialize(
        [deduplicated_shard, decontaminated_shard], instance=instance, resources=resources, tags=every_shard,
        run_config={"ops": {"decontaminated_shard": {"config": {"mmlu_path": ""}}}},
    )
    assert after_dedup.success
    for asset in ("deduplicated_shard", "decontaminated_shard"):
        for shard in shards:
            record = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[shard]), limit=1
            ).records[0]
            assert record.asset_materialization.metadata["documents_in"].value == store.row_count(
                stage_keys("curated" if asset == "deduplicated_shard" else "deduplicated", shard)["documents"])
        checks = {(e.check_name, e.partition): e.passed for e in after_dedup.get_asset_check_evaluations()
                  if e.asset_key.path[-1] == asset and e.partition is not None}
        assert {partition for _, partition in checks} == set(shards) and all(checks.values()), asset
    assert dg.materialize([tokenizer], instance=instance, resources=resources,
                          run_config={"ops": {"tokenizer": {"config": {"vocab_size": 300}}}}).success
    tokens = dg.materialize([tokenized_shard], instance=instance, resources=resources, tags=every_shard)
    assert tokens.success
    for shard in shards:
        record = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("tokenized_shard"), asset_partitions=[shard]), limit=1
        ).records[0]
        assert record.asset_materialization.metadata["documents"].value == store.row_count(
            stage_keys("decontaminated", shard)["documents"])
