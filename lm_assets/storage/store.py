"""One storage root for every stage: a local folder or an `s3://bucket/prefix`.

Writes are atomic: a local file is written under a temporary name and renamed, and an
S3 object appears only when its single PUT completes. A reader never sees half a file.

A partition's files are published together (`publish`), so a reader never sees half a partition
either: locally they are written into a hidden staging folder that is exchanged with the partition's
folder in one step (renamed onto it where the system cannot exchange); on S3 they are written under a fresh hidden generation prefix and a manifest naming that
generation is written last. Readers resolve a partition's keys through its manifest.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import glob
import io
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import polars as pl

from lm_assets.storage.keys import UnsafeKeyError, check_name, confined_path
from lm_assets.training.primitives import atomic_path

MANIFEST = ".published.json"
# Rows per parquet row group: readers decode a row group's column at once, so a group of MinHash
# signatures (512 bytes a row) stays a few MB, well inside a global step's DuckDB memory limit.
ROW_GROUP_ROWS = 16_384
# Document tables that hold HTML are written in smaller groups, so that a stage streaming them holds one
# group (about 130 MB of Common Crawl HTML) at a time.
DOCUMENT_ROW_GROUP_ROWS = 1024


def split_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/key` -> (`bucket`, `some/key`)."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://") :].partition("/")
    return bucket, key.strip("/")


SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def special_kind(mode: int) -> str | None:
    """What a file of `mode` (from `stat`) is when it is neither a regular file nor a folder; else None."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for test, kind in SPECIAL_KINDS if test(mode)), "not a file or folder")


class Storage:
    """Keys are relative paths such as `raw/<shard>/documents.parquet`. A key that would leave the
    root (`..`, an absolute path, a control character) is refused with UnsafeKeyError before any I/O."""

    def __init__(self, root: str, s3_client=None, confine_links: bool = False):
        """`confine_links`: a local key that resolves outside the root through a symlink is refused (a
        landing location, whose files come from elsewhere); otherwise links under the root are followed."""
        self.root = root.rstrip("/") if root != "/" else root
        self.is_s3 = root.startswith("s3://")
        self.confine_links = confine_links and not self.is_s3
        if self.is_s3:
            if s3_client is None:
                raise ValueError(f"storage root {root!r} is on S3 but no S3 client was given")
            self.bucket, self.prefix = split_s3_url(root)
        self.s3 = s3_client

    def uri(self, key: str) -> str:
        confined_path("/", key)
        return f"{self.root}/{key}"

    def _s3_key(self, key: str) -> str:
        confined_path("/", key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _s3_manifest(self, folder: str) -> dict | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=self._s3_key(f"{folder}/{MANIFEST}"))["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return None
        return json.loads(body)

    def _s3_object(self, key: str) -> str:
        """The object holding `key`: in its folder's published generation when the folder has one."""
        folder, _, name = key.rpartition("/")
        manifest = self._s3_manifest(folder) if folder else None
        if manifest and name in manifest["files"]:
            return self._s3_key(f"{folder}/{manifest['generation']}/{name}")
        return self._s3_key(key)

    def local_path(self, key: str) -> Path:
        """The file or folder of `key` under a local root. An S3 root has none: use `local_copy` for a
        file and `local_dir` for a folder, which work on both."""
        if self.is_s3:
            raise ValueError(
                f"storage root {self.root} is on S3, so {key!r} has no local path: read it with local_copy "
                "(a file) or local_dir (a folder)"
            )
        return Path(confined_path(self.root, key))

    # bytes -------------------------------------------------------------------------------
    def write_bytes(self, key: str, data: bytes) -> str:
        if self.is_s3:
            self.s3.put_object(Bucket=self.bucket, Key=self._s3_key(key), Body=data)
        else:
            with atomic_path(self.local_path(key)) as tmp:
                tmp.write_bytes(data)
        return self.uri(key)

    def put_file(self, key: str, path: str | Path) -> str:
        """Store a local file under `key` without reading it into memory (an upload on S3)."""
        if self.is_s3:
            self.s3.upload_file(str(path), self.bucket, self._s3_key(key))
        else:
            with atomic_path(self.local_path(key)) as tmp:
                shutil.copyfile(path, tmp)
        return self.uri(key)

    def read_bytes(self, key: str) -> bytes:
        if self.is_s3:
            return self.s3.get_object(Bucket=self.bucket, Key=self._s3_object(key))["Body"].read()
        return self.local_path(key).read_bytes()

    def exists(self, key: str) -> bool:
        if self.is_s3:
            obj = self._s3_object(key)
            resp = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=obj, MaxKeys=1)
            return any(o["Key"] == obj for o in resp.get("Contents", []))
        return self.local_path(key).exists()

    def file_state(self, key: str) -> tuple[int, float]:
        """`key`'s size in bytes and its last modification (seconds since the epoch): what changes while a
        writer is still at it."""
        if self.is_s3:
            head = self.s3.head_object(Bucket=self.bucket, Key=self._s3_object(key))
            return int(head["ContentLength"]), head["LastModified"].timestamp()
        info = self.local_path(key).stat()
        return info.st_size, info.st_mtime

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object under `prefix`, so a re-materialization replaces and never appends."""
        if not prefix.strip("/"):
            raise ValueError("refusing to delete the whole storage root")
        if self.is_s3:
            for key in self._s3_objects(prefix):
                self.s3.delete_object(Bucket=self.bucket, Key=self._s3_key(key))
        else:
            shutil.rmtree(self.local_path(prefix), ignore_errors=True)

    def list(self, prefix: str = "", hidden: bool = False) -> list[str]:
        """Keys under `prefix`, relative to the root, sorted. Names starting with a dot (staging,
        generations, temporary files) are left out unless `hidden`."""
        if self.is_s3:
            keys = []
            for key in self._s3_objects(prefix):
                folder, _, name = key.rpartition("/")
                if name == MANIFEST and not hidden:
                    keys += [f"{folder}/{f}" for f in self._s3_manifest(folder)["files"]]
                elif hidden or not any(part.startswith(".") for part in key.split("/")):
                    keys.append(key)
            return sorted(keys)
        base = self.local_path(prefix)
        if not base.exists():
            return []
        keys = (p.relative_to(self.root) for p in base.rglob("*") if p.is_file())
        return sorted(str(k) for k in keys if hidden or not any(part.startswith(".") for part in k.parts))

    def special_files(self, prefix: str = "") -> dict[str, str]:
        """What lies directly under `prefix` of a local root that `list` passes over for being neither a
        regular file nor a folder (a FIFO, a socket, a device, or a symlink to one), each with what it is.
        Found by `stat` alone: none is opened (opening a FIFO would wait for a writer). Empty on S3."""
        base = None if self.is_s3 else self.local_path(prefix)
        if base is None or not base.is_dir():
            return {}
        with os.scandir(base) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        found = {}
        for entry in entries:
            try:
                mode = os.stat(entry.path).st_mode
            except OSError:  # a dangling symlink: not a special file
                continue
            if kind := special_kind(mode):
                link = f"a symlink to {os.readlink(entry.path)}, " if entry.is_symlink() else ""
                key = f"{prefix.strip('/')}/{entry.name}" if prefix.strip("/") else entry.name
                found[key] = f"{link}{kind}, not a regular file: never opened"
        return found

    def _s3_objects(self, prefix: str) -> list[str]:
        """Every object under the folder `prefix`, hidden ones included, relative to the root."""
        full = self._s3_key(prefix.strip("/")) + "/" if prefix.strip("/") else (self.prefix + "/" if self.prefix else "")
        keys, token = [], None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": full}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self.s3.list_objects_v2(**kwargs)
            keys += [o["Key"][len(self.prefix) + 1 :] if self.prefix else o["Key"] for o in resp.get("Contents", [])]
            if not resp.get("IsTruncated"):
                return keys
            token = resp["NextContinuationToken"]

    @contextmanager
    def work_folder(self, prefix: str) -> Iterator[Path]:
        """A scratch folder for what a stage writes before it publishes `prefix`. Under a local root it lies
        beside the partition's folder, named as a staging folder, so that a later publish of the partition
        sweeps it away when the process that made it was killed; for S3, in the system's temp folder."""
        if self.is_s3:
            with tempfile.TemporaryDirectory(prefix="lm-assets-work-") as folder:
                yield Path(folder)
            return
        target = self.local_path(prefix)
        folder = target.with_name(f".{target.name}.{uuid.uuid4().hex}.staging")
        folder.mkdir(parents=True)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def publish(self, prefix: str, files: dict[str, bytes | pl.DataFrame | Path]) -> str:
        """Make `files` (name -> bytes, a table, or a local file written already) the whole content of the
        folder `prefix`, in one step: a reader sees the earlier set or this one, never a mix, and a write
        that dies half-way leaves the earlier set in place."""
        if not prefix.strip("/"):
            raise ValueError("a partition needs its own folder under the storage root")
        for name in files:
            check_name(name, "file name")
        token = uuid.uuid4().hex
        if self.is_s3:
            generation = f".gen-{token}"
            for name, data in files.items():
                key = self._s3_key(f"{prefix}/{generation}/{name}")
                if isinstance(data, Path):
                    self.s3.upload_file(str(data), self.bucket, key)
                else:
                    self.s3.put_object(Bucket=self.bucket, Key=key, Body=_as_bytes(data))
            manifest = {"generation": generation, "files": sorted(files)}
            self.s3.put_object(Bucket=self.bucket, Key=self._s3_key(f"{prefix}/{MANIFEST}"), Body=json.dumps(manifest).encode())
            for key in self._s3_objects(prefix):
                if key != f"{prefix}/{MANIFEST}" and not key.startswith(f"{prefix}/{generation}/"):
                    self.s3.delete_object(Bucket=self.bucket, Key=self._s3_key(key))
            return self.uri(prefix)
        target = self.local_path(prefix)
        sweep_leftovers(target)
        staging = target.with_name(f".{target.name}.{token}.staging")
        retired = target.with_name(f".{target.name}.{token}.retired")
        staging.mkdir(parents=True)
        try:
            for name, data in files.items():
                if isinstance(data, pl.DataFrame):
                    data.write_parquet(staging / name, compression="zstd", row_group_size=ROW_GROUP_ROWS)
                elif isinstance(data, Path):
                    shutil.copyfile(data, staging / name)
                else:
                    (staging / name).write_bytes(_as_bytes(data))
            replace_folder(staging, target, retired, prefix)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(retired, ignore_errors=True)
        return self.uri(prefix)

    def outside_link(self, key: str) -> str | None:
        """Where a local `key` leads when a symlink takes it outside the root; None when it stays inside
        (or the root is on S3)."""
        if self.is_s3:
            return None
        real, root = os.path.realpath(self.local_path(key)), os.path.realpath(self.root)
        return None if os.path.commonpath([root, real]) == root else real

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        """A local file path for `key`: the file itself, or a temporary download from S3."""
        if not self.is_s3:
            if self.confine_links and (target := self.outside_link(key)):
                raise UnsafeKeyError(f"{key!r} is refused: it is a symlink to {target}, outside the root {self.root}")
            path = self.local_path(key)
            if path.exists() and (kind := special_kind(path.stat().st_mode)):
                raise ValueError(f"{key!r} is refused: {kind} under {self.root}, not a regular file, is never opened")
            yield path
            return
        suffix = "".join(Path(key).suffixes)
        with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
            self.s3.download_fileobj(self.bucket, self._s3_object(key), tmp)
            tmp.flush()
            yield Path(tmp.name)

    @contextmanager
    def local_dir(self, prefix: str, names: list[str] | None = None) -> Iterator[Path]:
        """A local folder holding the files under `prefix` (as `list` names them, relative to it): the
        folder itself, or a temporary download from S3 that lasts as long as the context, of `names`
        only when given."""
        if not self.is_s3:
            yield self.local_path(prefix)
            return
        prefix = prefix.rstrip("/")
        keys = [f"{prefix}/{name}" for name in names] if names is not None else self.list(prefix)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for key in keys:
                target = folder / key[len(prefix) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.read_bytes(key))
            yield folder

    def scan_parquet(self, key: str) -> pl.LazyFrame:
        """A lazy table: scanned in place on a local root, read whole from S3."""
        if self.is_s3:
            return self.read_parquet(key).lazy()
        return pl.scan_parquet(self.local_path(key))

    # tables ------------------------------------------------------------------------------
    def write_parquet(self, key: str, df: pl.DataFrame) -> str:
        return self.write_bytes(key, _as_bytes(df))

    def iter_parquet(self, key: str, batch_rows: int = DOCUMENT_ROW_GROUP_ROWS) -> Iterator[pl.DataFrame]:
        """The table under `key` in order, `batch_rows` rows at a time (an S3 object is downloaded to a local
        file first, not into memory)."""
        with self.local_copy(key) as path:
            table = pl.scan_parquet(path)
            rows = table.select(pl.len()).collect().item()
            if rows == 0:
                yield table.collect()  # an empty table still gives its columns
            for offset in range(0, rows, batch_rows):  # a slice reads only the row groups it covers
                yield table.slice(offset, batch_rows).collect()

    def read_parquet(self, key: str, columns: list[str] | None = None) -> pl.DataFrame:
        if self.is_s3:
            return pl.read_parquet(io.BytesIO(self.read_bytes(key)), columns=columns)
        return pl.read_parquet(self.local_path(key), columns=columns)

    def row_count(self, key: str) -> int:
        """Rows in a stored table, from its footer where the file is local."""
        source = io.BytesIO(self.read_bytes(key)) if self.is_s3 else self.local_path(key)
        return pl.scan_parquet(source).select(pl.len()).collect().item()


# A publish's hidden staging or retired folder nothing has written to for this long is a leftover of a
# publish that died (a killed worker): the next publish of the partition removes it.
LEFTOVER_AFTER_S = 15 * 60
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def replace_folder(staging: Path, target: Path, retired: Path, prefix: str) -> None:
    """Make `staging` the folder `target`. Where the system can (Linux's renameat2), the two are exchanged
    in one step, so `target` always holds a whole set, and the old set is left in `staging`; elsewhere
    the old folder is renamed away first, `retired`, which leaves a moment with no folder."""
    try:
        if target.exists() and exchange_folders(staging, target):
            return
        if target.exists():
            os.rename(target, retired)
        os.rename(staging, target)
    except OSError as exc:
        # The folder vanished under the first rename, or another set took its place before the second.
        if exc.errno not in (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY):
            raise
        raise RuntimeError(f"another run is publishing {prefix} at the same time ({exc.strerror}): "
                           "rerun this one when it has finished") from exc


@functools.lru_cache(maxsize=1)
def _renameat2():
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


def exchange_folders(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the system or file system cannot."""
    function = _renameat2() if sys.platform == "linux" else None
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def sweep_leftovers(target: Path, older_than_s: float | None = None) -> list[Path]:
    """Remove the hidden staging and retired folders of `target` that died with their publish (nothing
    in them written for `older_than_s`). Where a publish died between its two renames (the fallback of
    `replace_folder`), the partition folder is missing: the newest retired set is put back first.
    Returns what was removed."""
    older_than_s = LEFTOVER_AFTER_S if older_than_s is None else older_than_s
    leftovers = sorted(target.parent.glob(f".{glob.escape(target.name)}.*.staging")) + sorted(
        target.parent.glob(f".{glob.escape(target.name)}.*.retired"))
    now = time.time()
    stale = [path for path in leftovers if now - last_written(path) >= older_than_s]
    retired = sorted((p for p in stale if p.name.endswith(".retired")), key=last_written)
    if retired and not target.exists():
        os.rename(retired.pop(), target)
        stale = [p for p in stale if p.exists()]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def last_written(folder: Path) -> float:
    """The newest modification time of the folder and what is in it."""
    try:
        return max([folder.stat().st_mtime, *(entry.stat().st_mtime for entry in folder.iterdir())])
    except FileNotFoundError:
        return time.time()


def write_batches(batches: Iterator[pl.DataFrame], schema: dict, path: str | Path, row_group_rows: int = ROW_GROUP_ROWS) -> Path:
    """Write a stream of frames to one parquet file without holding more than a row group: the same bytes
    `publish` writes for their concatenation when `row_group_rows` is the same."""
    from polars.io.plugins import register_io_source

    def source(with_columns, predicate, n_rows, batch_size):  # a full scan: no projection, no filter
        yield from batches

    register_io_source(source, schema=schema).sink_parquet(path, compression="zstd", row_group_size=row_group_rows)
    return Path(path)


def write_stream(batches: Iterator[pl.DataFrame], path: str | Path, row_group_rows: int = ROW_GROUP_ROWS) -> Path:
    """Frames as they come, into one parquet file: the bytes `publish` writes for their concatenation. Each
    frame is set down in a file of its own beside `path` as it comes, then polars' streaming sink joins them
    a row group at a time. (A sink that pulls the frames from a Python source runs the code that makes them
    on polars' threads, and held twice the memory of this for extraction; `write_batches` is for a reader.)"""
    path = Path(path)
    parts = path.with_name(f".{path.name}.parts")
    parts.mkdir()
    try:
        files = []
        for number, frame in enumerate(batches):
            files.append(parts / f"{number:09d}.parquet")
            frame.write_parquet(files[-1], compression="lz4")
        if not files:
            raise ValueError("write_stream needs at least one frame (an empty one gives the columns)")
        pl.scan_parquet(files).sink_parquet(path, compression="zstd", row_group_size=row_group_rows)
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return path


def _as_bytes(data: bytes | pl.DataFrame) -> bytes:
    if isinstance(data, pl.DataFrame):
        buf = io.BytesIO()
        data.write_parquet(buf, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        return buf.getvalue()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a stored file holds bytes or a table, not {type(data).__name__}")
    return data
