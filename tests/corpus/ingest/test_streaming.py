"""A shard read as a stream of batches: the same documents, in order, and the same stored bytes."""

from __future__ import annotations

import io
import json

import polars as pl
import pyarrow.parquet as pq
import pytest

from lm_assets.corpus.curation.extract import ExtractConfig, extract_batches, extract_documents
from lm_assets.corpus.ingest.readers import DOCUMENT_SCHEMA, ShardReading, read_shard
from lm_assets.storage.accounting import drop_examples
from lm_assets.storage.store import ROW_GROUP_ROWS, write_batches, write_stream
from tests.support.warc_builder import WarcBuilder, page


def mixed_shard(tmp_path, pages: int = 120):
    """HTML pages with a request, a 404 and an image among them, and a truncated record at the end."""
    builder = WarcBuilder().warcinfo()
    for i in range(pages):
        builder.response(f"https://s.example/{i}", page(f"Page {i}", f"<p>Page {i} says something {'useful ' * (i % 9)}.</p>"))
        if i % 40 == 7:
            builder.request(f"https://s.example/{i}")
            builder.response(f"https://s.example/missing-{i}", "<p>gone</p>", status="404 Not Found")
            builder.response(f"https://s.example/{i}.png", b"\x89PNG....", content_type="image/png")
    path = builder.write(tmp_path / "mixed.warc.gz")
    path.write_bytes(path.read_bytes() + b"\x1f\x8b\x08\x00truncated")
    return path


@pytest.mark.parametrize("batch_rows", [1, 7, 50, 10_000])
def test_batches_hold_the_documents_in_order_and_the_rest_is_accounted(tmp_path, batch_rows):
    path = mixed_shard(tmp_path)
    whole = read_shard(path)
    reading = ShardReading(path, batch_rows=batch_rows)
    batches = list(reading.batches())
    assert all(batch.height == batch_rows for batch in batches[:-1]) and 0 < batches[-1].height <= batch_rows
    assert len(batches) == -(-whole.documents.height // batch_rows)
    assert pl.concat(batches).equals(whole.documents)
    rest = reading.read.frames()
    assert rest.dropped.equals(whole.dropped) and rest.quarantine.equals(whole.quarantine)
    assert rest.records == whole.records == whole.documents.height + whole.dropped.height + whole.quarantine.height


def test_streamed_tables_are_the_bytes_of_one_write_in_the_same_row_groups(tmp_path):
    documents = read_shard(mixed_shard(tmp_path, pages=300)).documents
    one = io.BytesIO()
    documents.write_parquet(one, compression="zstd", row_group_size=64)
    for batch_rows in (1, 50, 1000):
        out = tmp_path / f"streamed-{batch_rows}.parquet"
        write_batches(ShardReading(tmp_path / "mixed.warc.gz", batch_rows=batch_rows).batches(), DOCUMENT_SCHEMA, out, 64)
        assert out.read_bytes() == one.getvalue(), batch_rows
        layout = pq.ParquetFile(out).metadata
        assert [layout.row_group(i).num_rows for i in range(layout.num_row_groups)] == [64] * 4 + [300 - 256]
    small = documents.head(40)
    assert write_batches(iter([small]), DOCUMENT_SCHEMA, tmp_path / "small.parquet").read_bytes() == (
        _bytes(small, ROW_GROUP_ROWS)
    )


def test_frames_set_down_as_they_come_are_the_bytes_of_one_write(tmp_path):
    documents = read_shard(mixed_shard(tmp_path, pages=300)).documents
    for rows in (1, 50, 1000):
        frames = (documents.slice(start, rows) for start in range(0, documents.height, rows))
        out = write_stream(frames, tmp_path / f"stream-{rows}.parquet", 64)
        assert out.read_bytes() == _bytes(documents, 64), rows
        layout = pq.ParquetFile(out).metadata
        assert [layout.row_group(i).num_rows for i in range(layout.num_row_groups)] == [64] * 4 + [300 - 256]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.warc.gz", *(f"stream-{r}.parquet" for r in (1, 1000, 50))]
    empty = write_stream(iter([documents.head(0)]), tmp_path / "empty.parquet")
    assert pl.read_parquet(empty).schema == documents.schema
    with pytest.raises(ValueError, match="at least one frame"):
        write_stream(iter([]), tmp_path / "none.parquet")


def test_extraction_in_batches_is_extraction_of_the_whole(tmp_path):
    path = mixed_shard(tmp_path)
    documents = read_shard(path).documents.with_columns(
        pl.when(pl.col("url").str.ends_with("3")).then(pl.lit("<p></p>")).otherwise("html").alias("html")
    )
    whole = extract_documents(documents, ExtractConfig())
    streamed, sources = extract_batches((documents.slice(i, 16) for i in range(0, documents.height, 16)), ExtractConfig())
    assert streamed.kept.equals(whole.kept) and streamed.dropped.equals(whole.dropped)
    assert streamed.dropped.height > 5 and streamed.stats["batches"] == -(-documents.height // 16)
    assert {k: streamed.stats[k] for k in whole.stats} == whole.stats
    assert set(sources["doc_id"]) <= set(whole.dropped["doc_id"])
    _, one_batch = extract_batches(iter([documents]), ExtractConfig())
    assert one_batch["doc_id"].to_list() == whole.dropped["doc_id"].head(3).to_list()  # only what examples show
    assert sources["text"].to_list() == ["<p></p>"] * sources.height
    as_read = documents.select("doc_id", "url", pl.col("html").alias("text"))
    assert drop_examples(streamed.dropped, sources).equals(drop_examples(whole.dropped, as_read))
    empty, _ = extract_batches(iter([]), ExtractConfig())
    assert empty.kept.height == 0 and empty.kept.columns == whole.kept.columns
    assert json.dumps(empty.stats["docs_in"]) == "0"


def _bytes(frame: pl.DataFrame, row_group_rows: int) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer, compression="zstd", row_group_size=row_group_rows)
    return buffer.getvalue()
