"""Names that become paths: shard keys, run names, checkpoint keys and storage keys stay inside their root."""

import re

import pytest

from lm_assets.storage.keys import UnsafeKeyError, check_checkpoint_key, check_name, confined_path, landing_files
from lm_assets.storage.store import Storage

HOSTILE = {
    "../../../escape/x.warc.gz": "path separator",
    "/home/user/secret.jsonl": "path separator",
    "..": "names a folder",
    ".": "names a folder",
    "": "empty",
    "a\x00b.warc": "control character U+0000",
    "a\nb.warc": "control character U+000A",
    "evil\u202egpj.warc": "control character U+202E",
    "..\\..\\x.warc": "path separator",
    ".hidden.warc.gz": "starts with a dot",
    "x" * 256 + ".warc": "longer than a file name",
}


@pytest.mark.parametrize("key, problem", HOSTILE.items())
def test_hostile_shard_keys_are_refused_with_the_reason(key, problem):
    with pytest.raises(UnsafeKeyError, match=re.escape(problem)):
        check_name(key)


@pytest.mark.parametrize("key", ["crawl-00000.warc.gz", "页面.jsonl", "a b (1).parquet", "x..y.warc"])
def test_ordinary_file_names_pass(key):
    assert check_name(key) == key


def test_checkpoint_keys_split_into_a_checked_run_and_tag():
    assert check_checkpoint_key("main-run-step_00000040") == ("main-run", "step_00000040")
    for key in ("../x-step_00000040", "main-../../etc", "main-step_40", "/abs-step_00000040", "step_00000040"):
        with pytest.raises(UnsafeKeyError):
            check_checkpoint_key(key)


def test_storage_keys_cannot_climb_out_of_the_root(tmp_path):
    root = tmp_path / "root"
    assert confined_path(root, "raw/s1/documents.parquet") == str(root / "raw/s1/documents.parquet")
    assert confined_path(root, "raw/./s1//a") == str(root / "raw/s1/a")
    for key in ("../x", "raw/../../x", "/etc/passwd", "raw/\x00", "raw\\..\\..\\x"):
        with pytest.raises(UnsafeKeyError, match="refused"):
            confined_path(root, key)


def test_local_storage_refuses_escaping_keys_before_any_io(tmp_path):
    store = Storage(str(tmp_path / "root"))
    (tmp_path / "secret.jsonl").write_text('{"text": "secret"}')
    for call in (
        lambda: store.read_bytes("../secret.jsonl"),
        lambda: store.write_bytes("raw/../../outside.json", b"x"),
        lambda: store.publish("raw/../../outside", {"summary.json": b"x"}),
        lambda: store.local_path("/etc/passwd"),
        lambda: store.list("../"),
    ):
        with pytest.raises(UnsafeKeyError):
            call()
    with pytest.raises(ValueError, match="whole storage root"):
        store.delete_prefix("")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.jsonl"]


def test_landing_listing_names_every_skipped_file_with_its_reason():
    shards, skipped = landing_files(
        ["a.warc.gz", "B.JSONL", ".partial.warc.gz", "notes.txt", "sub/c.warc.gz", "sub/d.warc.gz", "bad\x07.warc"],
        (".warc.gz", ".jsonl"),
    )
    assert shards == ["a.warc.gz", "B.JSONL"]
    assert set(skipped) == {".partial.warc.gz", "notes.txt", "sub/", "bad\x07.warc"}
    assert "starts with a dot" in skipped[".partial.warc.gz"]
    assert "not a shard format" in skipped["notes.txt"]
    assert "folder" in skipped["sub/"]
    assert "control character" in skipped["bad\x07.warc"]
