"""One storage root for every stage: a local folder or an `s3://bucket/prefix`.

Writes are atomic: a local file is written under a temporary name and renamed, and an
S3 object appears only when its single PUT completes. A reader never sees half a file.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import polars as pl


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed onto it when the block succeeds and removed if it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def split_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/key` -> (`bucket`, `some/key`)."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://") :].partition("/")
    return bucket, key.strip("/")


class Storage:
    """Keys are relative paths such as `raw/<shard>/documents.parquet`."""

    def __init__(self, root: str, s3_client=None):
        self.root = root.rstrip("/") if root != "/" else root
        self.is_s3 = root.startswith("s3://")
        if self.is_s3:
            if s3_client is None:
                raise ValueError(f"storage root {root!r} is on S3 but no S3 client was given")
            self.bucket, self.prefix = split_s3_url(root)
        self.s3 = s3_client

    def uri(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _s3_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def local_path(self, key: str) -> Path:
        return Path(self.root) / key

    # bytes -------------------------------------------------------------------------------
    def write_bytes(self, key: str, data: bytes) -> str:
        if self.is_s3:
            self.s3.put_object(Bucket=self.bucket, Key=self._s3_key(key), Body=data)
        else:
            with atomic_path(self.local_path(key)) as tmp:
                tmp.write_bytes(data)
        return self.uri(key)

    def read_bytes(self, key: str) -> bytes:
        if self.is_s3:
            return self.s3.get_object(Bucket=self.bucket, Key=self._s3_key(key))["Body"].read()
        return self.local_path(key).read_bytes()

    def exists(self, key: str) -> bool:
        if self.is_s3:
            resp = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self._s3_key(key), MaxKeys=1)
            return any(o["Key"] == self._s3_key(key) for o in resp.get("Contents", []))
        return self.local_path(key).exists()

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object under `prefix`, so a re-materialization replaces and never appends."""
        if self.is_s3:
            for key in self.list(prefix):
                self.s3.delete_object(Bucket=self.bucket, Key=self._s3_key(key))
        else:
            shutil.rmtree(self.local_path(prefix), ignore_errors=True)

    def list(self, prefix: str = "") -> list[str]:
        """Keys under `prefix`, relative to the root, sorted."""
        if self.is_s3:
            keys, token = [], None
            full = self._s3_key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
            while True:
                kwargs = {"Bucket": self.bucket, "Prefix": full}
                if token:
                    kwargs["ContinuationToken"] = token
                resp = self.s3.list_objects_v2(**kwargs)
                for obj in resp.get("Contents", []):
                    rel = obj["Key"][len(self.prefix) + 1 :] if self.prefix else obj["Key"]
                    keys.append(rel)
                if not resp.get("IsTruncated"):
                    return sorted(keys)
                token = resp["NextContinuationToken"]
        base = self.local_path(prefix)
        if not base.exists():
            return []
        root = Path(self.root)
        return sorted(
            str(p.relative_to(root))
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        """A local file path for `key`: the file itself, or a temporary download from S3."""
        if not self.is_s3:
            yield self.local_path(key)
            return
        suffix = "".join(Path(key).suffixes)
        with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
            self.s3.download_fileobj(self.bucket, self._s3_key(key), tmp)
            tmp.flush()
            yield Path(tmp.name)

    # tables ------------------------------------------------------------------------------
    def write_parquet(self, key: str, df: pl.DataFrame) -> str:
        buf = io.BytesIO()
        df.write_parquet(buf, compression="zstd")
        return self.write_bytes(key, buf.getvalue())

    def read_parquet(self, key: str, columns: list[str] | None = None) -> pl.DataFrame:
        if self.is_s3:
            return pl.read_parquet(io.BytesIO(self.read_bytes(key)), columns=columns)
        return pl.read_parquet(self.local_path(key), columns=columns)
