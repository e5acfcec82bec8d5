import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import boto3
import polars as pl
import pytest
from benchlib.faults import KILLED_AT, POINTS

from lm_assets.storage.store import Storage, split_s3_url


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
    exercise_publish(store)


def exercise_publish(store: Storage):
    """A partition's files appear together and replace the earlier set whole."""
    store.publish("curated/p", {"documents.parquet": frame(), "dropped.parquet": frame().head(0), "note.json": b"{}"})
    assert store.list("curated/p") == ["curated/p/documents.parquet", "curated/p/dropped.parquet", "curated/p/note.json"]
    assert store.row_count("curated/p/documents.parquet") == 2 and store.exists("curated/p/note.json")
    with store.local_copy("curated/p/note.json") as path:
        assert path.read_bytes() == b"{}"
    store.publish("curated/p", {"documents.parquet": frame().head(1), "dropped.parquet": frame().head(1)})
    assert store.list("curated/p") == ["curated/p/documents.parquet", "curated/p/dropped.parquet"]
    assert (store.row_count("curated/p/documents.parquet"), store.row_count("curated/p/dropped.parquet")) == (1, 1)
    assert not store.exists("curated/p/note.json")
    # A publish that fails half-way leaves the earlier set, whole.
    with pytest.raises(TypeError):
        store.publish("curated/p", {"documents.parquet": frame(), "dropped.parquet": object()})
    assert (store.row_count("curated/p/documents.parquet"), store.row_count("curated/p/dropped.parquet")) == (1, 1)
    with pytest.raises(ValueError, match="file name"):
        store.publish("curated/p", {"../x.parquet": frame()})
    store.delete_prefix("curated")


def local_views(store: Storage) -> None:
    """local_dir, local_copy and scan_parquet give the same files on a local and an S3 root."""
    store.publish("packed", {"manifest.json": b'{"n": 1}', "train_segments.parquet": frame(), "train.bin": b"\x00" * 8})
    with store.local_dir("packed") as folder:
        assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "train.bin", "train_segments.parquet"]
        assert (folder / "manifest.json").read_bytes() == b'{"n": 1}'
    with store.local_dir("packed", names=["manifest.json"]) as folder:
        assert (folder / "manifest.json").exists()
        assert store.is_s3 == (not (folder / "train.bin").exists())
    with store.local_copy("packed/train.bin") as path:
        assert path.read_bytes() == b"\x00" * 8
    assert store.scan_parquet("packed/train_segments.parquet").collect().equals(frame())
    if store.is_s3:
        with pytest.raises(ValueError, match="is on S3, so 'packed' has no local path"):
            store.local_path("packed")
    else:
        assert store.local_path("packed") == Path(store.root) / "packed"


def test_local_and_s3_roots_give_the_same_local_views(tmp_path, s3_server):
    local_views(Storage(str(tmp_path / "root")))
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    local_views(Storage(f"s3://{s3_server.bucket}/views", s3_client=client))


def test_local_storage_writes_atomically(tmp_path):
    store = Storage(str(tmp_path / "root"))
    exercise(store)
    leftovers = [p.name for p in (tmp_path / "root").rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_s3_storage_against_a_real_s3_protocol_server(s3_server):
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    exercise(Storage(f"s3://{s3_server.bucket}/prefix/run", s3_client=client))
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert keys == ["prefix/run/raw/s2/documents.parquet"]


KILLED_PUBLISH = textwrap.dedent("""
    import os, signal, sys
    import polars as pl
    from lm_assets.storage.store import Storage

    class DiesWhenWritten(pl.DataFrame):
        def write_parquet(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

    store = Storage(sys.argv[1])
    store.publish("raw/s1", {"documents.parquet": pl.DataFrame({"doc_id": ["new"] * 5}), "dropped.parquet": DiesWhenWritten({"doc_id": ["new"]})})
""")


def test_a_partition_killed_mid_write_keeps_its_earlier_files_together(tmp_path):
    root = tmp_path / "root"
    store = Storage(str(root))
    store.publish("raw/s1", {"documents.parquet": frame(), "dropped.parquet": frame().head(1)})
    killed = subprocess.run([sys.executable, "-c", KILLED_PUBLISH, str(root)], capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    # The new documents file was written before the kill; readers still see the earlier pair.
    assert store.read_parquet("raw/s1/documents.parquet")["doc_id"].to_list() == ["a", "b"]
    assert store.read_parquet("raw/s1/dropped.parquet")["doc_id"].to_list() == ["a"]
    assert store.list("raw") == ["raw/s1/documents.parquet", "raw/s1/dropped.parquet"]
    staged = [p for p in (root / "raw").iterdir() if p.name.startswith(".s1.")]
    assert len(staged) == 1 and (staged[0] / "documents.parquet").exists()


def hidden(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.name.startswith("."))


@pytest.mark.parametrize("point", POINTS)
def test_a_publish_killed_at_any_point_leaves_a_whole_set_and_the_next_one_sweeps(tmp_path, monkeypatch, point):
    import lm_assets.storage.store as store_module

    root = tmp_path / "root"
    store = Storage(str(root))
    store.publish("stage/s1", {"a.json": b"old", "b.json": b"old"})
    killed = subprocess.run([sys.executable, "-c", KILLED_AT, str(root), point], capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    files = {key: store.read_bytes(key) for key in store.list("stage")}
    if point == "between_renames":
        assert files == {} and any(name.endswith(".retired") for name in hidden(root))  # the fallback's window
    else:
        expected = b"new" if point == "after_exchange" else b"old"
        assert files == {"stage/s1/a.json": expected, "stage/s1/b.json": expected}
    assert hidden(root)  # what the killed publish left
    fresh = store_module.sweep_leftovers(root / "stage" / "s1")
    assert fresh == [] and hidden(root)  # too recent: it may be a publish still running
    monkeypatch.setattr(store_module, "LEFTOVER_AFTER_S", 0)
    store_module.sweep_leftovers(root / "stage" / "s1")
    restored = {key: store.read_bytes(key) for key in store.list("stage")}
    assert set(restored.values()) == ({b"new"} if point == "after_exchange" else {b"old"})
    assert hidden(root) == []
    store.publish("stage/s1", {"a.json": b"next"})
    assert store.list("stage") == ["stage/s1/a.json"] and hidden(root) == []


def test_a_publish_over_a_folder_is_one_exchange_on_linux(tmp_path, monkeypatch):
    import lm_assets.storage.store as store_module

    if not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux's")
    store = Storage(str(tmp_path))
    store.publish("stage/s1", {"a.json": b"old"})
    renames = []
    real = os.rename
    monkeypatch.setattr(store_module.os, "rename", lambda a, b: (renames.append((a, b)), real(a, b)))
    store.publish("stage/s1", {"a.json": b"new"})
    assert renames == [] and store.read_bytes("stage/s1/a.json") == b"new" and hidden(tmp_path) == []


def test_a_concurrent_publish_is_named_as_the_cause(tmp_path, monkeypatch):
    import lm_assets.storage.store as store_module

    store = Storage(str(tmp_path))
    store.publish("stage/s1", {"a.json": b"first"})
    target = tmp_path / "stage" / "s1"
    real = os.rename

    def rename_then_race(src, dst):  # another run puts its set in place right after this one renames away
        real(src, dst)
        if str(dst).endswith(".retired"):
            target.mkdir()
            (target / "a.json").write_bytes(b"other run")

    monkeypatch.setattr(store_module, "exchange_folders", lambda a, b: False)
    monkeypatch.setattr(store_module.os, "rename", rename_then_race)
    with pytest.raises(RuntimeError, match="another run is publishing stage/s1"):
        store.publish("stage/s1", {"a.json": b"second"})
    assert store.read_bytes("stage/s1/a.json") == b"other run"


def test_s3_root_needs_a_client():
    with pytest.raises(ValueError, match="no S3 client"):
        Storage("s3://bucket/x")
    assert split_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")


def test_a_stage_works_beside_its_partition_and_a_killed_one_is_swept(tmp_path):
    import os
    import time

    from lm_assets.storage.store import LEFTOVER_AFTER_S, Storage

    store = Storage(str(tmp_path))
    with store.work_folder("curated/s1") as work:
        assert work.parent == tmp_path / "curated" and work.name.startswith(".s1.") and work.name.endswith(".staging")
        (work / "documents.parquet").write_bytes(b"kept so far")
    assert not work.exists()
    # A stage killed mid-shard leaves its work folder: under the storage root, not in /tmp, and the next
    # publish of the partition removes it once nothing was written in it for a while.
    killed = tmp_path / "curated" / ".s1.deadbeef.staging"
    killed.mkdir()
    (killed / "documents.parquet").write_bytes(b"half")
    old = time.time() - LEFTOVER_AFTER_S - 1
    for path in (killed / "documents.parquet", killed):
        os.utime(path, (old, old))
    store.publish("curated/s1", {"summary.json": b"{}"})
    assert not killed.exists() and (tmp_path / "curated" / "s1" / "summary.json").exists()


def test_fifos_sockets_and_devices_are_named_and_never_opened(tmp_path):
    import socket

    root = tmp_path / "root"
    root.mkdir()
    (root / "real.warc.gz").write_bytes(b"x")
    (root / "folder").mkdir()
    os.mkfifo(root / "pipe.warc.gz")
    (root / "to-pipe.jsonl").symlink_to(root / "pipe.warc.gz")
    (root / "null.jsonl").symlink_to("/dev/null")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    try:
        store = Storage(str(root))
        assert store.list() == ["real.warc.gz"]
        assert store.special_files() == {
            "pipe.warc.gz": "a FIFO (named pipe), not a regular file: never opened",
            "to-pipe.jsonl": f"a symlink to {root / 'pipe.warc.gz'}, a FIFO (named pipe), not a regular file: never opened",
            "null.jsonl": "a symlink to /dev/null, a character device, not a regular file: never opened",
            "sock": "a socket, not a regular file: never opened",
        }
        for key in ("pipe.warc.gz", "to-pipe.jsonl"):
            with pytest.raises(ValueError, match=f"{key!r} is refused: a FIFO"), store.local_copy(key):
                pass
        assert Storage(str(tmp_path / "nowhere")).special_files() == {}
    finally:
        listener.close()
