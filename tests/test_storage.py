import boto3
import polars as pl
import pytest

from lm_assets.corpus.storage import Storage, split_s3_url


def frame():
    return pl.DataFrame({"doc_id": ["a", "b"], "text": ["one", "两"]})


def exercise(store: Storage):
    assert store.list() == []
    store.write_parquet("raw/s1/documents.parquet", frame())
    store.write_bytes("raw/s1/summary.json", b'{"records": 2}')
    store.write_parquet("raw/s2/documents.parquet", frame().head(1))
    assert store.read_parquet("raw/s1/documents.parquet").equals(frame())
    assert store.read_parquet("raw/s1/documents.parquet", columns=["text"])["text"].to_list() == ["one", "两"]
    assert store.list("raw/s1") == ["raw/s1/documents.parquet", "raw/s1/summary.json"]
    assert store.exists("raw/s1/summary.json") and not store.exists("raw/s1/summary")
    # Writing again replaces, never appends.
    store.write_parquet("raw/s1/documents.parquet", frame().head(1))
    assert store.read_parquet("raw/s1/documents.parquet").height == 1
    with store.local_copy("raw/s1/summary.json") as path:
        assert path.read_bytes() == b'{"records": 2}'
    store.delete_prefix("raw/s1")
    assert store.list() == ["raw/s2/documents.parquet"]


def test_local_storage_writes_atomically(tmp_path):
    store = Storage(str(tmp_path / "root"))
    exercise(store)
    leftovers = [p.name for p in (tmp_path / "root").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_s3_storage_against_a_real_s3_protocol_server(s3_server):
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    exercise(Storage(f"s3://{s3_server.bucket}/prefix/run", s3_client=client))
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert keys == ["prefix/run/raw/s2/documents.parquet"]


def test_s3_root_needs_a_client():
    with pytest.raises(ValueError, match="no S3 client"):
        Storage("s3://bucket/x")
    assert split_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
