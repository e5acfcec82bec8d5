"""raw_shard and extracted_shard on a shard many batches long: they stream it, and publish what the whole
shard read at once gives."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pyarrow.parquet as pq

from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
from lm_assets.corpus.ingest.readers import BATCH_ROWS, read_shard
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.curation.assets import extracted_shard
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.storage.layout import raw_keys, stage_keys
from lm_assets.storage.store import DOCUMENT_ROW_GROUP_ROWS, Storage
from tests.support.warc_builder import WarcBuilder, page

PAGES = 2 * BATCH_ROWS + 100


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
    resources = {"storage": StorageResource(root=str(tmp_path / "storage")), "landing": LandingResource(root=str(landing))}
    result = dg.materialize([raw_shard, extracted_shard], partition_key=shard.name, instance=instance, resources=resources)
    assert result.success
    meta = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("raw_shard")}
    meta |= {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("extracted_shard")}
    assert meta["raw_shard"]["batches"].value == meta["extracted_shard"]["batches"].value == 3
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
