"""Bit-level primitives, and atomic file writes, shared by the training program and the corpus library.

- `splitmix64(x)`: splitmix64's finalizer, a bijection of uint64 that scrambles every bit. Takes
  anything `np.asarray` turns into uint64.
- `fmix64(x)`: MurmurHash3's 64-bit finalizer on a uint64 array; returns a new array.
- `read_varint(data, pos)`: the protobuf base-128 varint at `data[pos]`, and the position after it.
- `atomic_path(path)`: a temporary name beside `path` (`temp_beside`) to write, renamed onto `path` when
  the block succeeds, so a reader never sees half a file.

Arithmetic wraps mod 2**64 (numpy uint64). The values must never change: data splits and orders,
shuffles, near-duplicate signatures and decontamination grams are all derived from them.

numpy and the standard library only, and nothing from `training` or `lm_assets`: the training
program (run alone under deepspeed or torchrun) and `lm_assets.corpus` (which must not import
torch) both import it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

_U64 = np.uint64
_FMIX1 = _U64(0xFF51AFD7ED558CCD)
_FMIX2 = _U64(0xC4CEB9FE1A85EC53)


def splitmix64(x) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = np.asarray(x, dtype=_U64) + _U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's fmix64 on a uint64 array (wrapping arithmetic); `x` is left as it was."""
    x = x ^ (x >> _U64(33))
    x *= _FMIX1
    x ^= x >> _U64(33)
    x *= _FMIX2
    x ^= x >> _U64(33)
    return x


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint starting at `data[pos]`, and the position just after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def temp_beside(path: Path) -> Path:
    """A fresh hidden name in `path`'s folder, to write before renaming onto `path`."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path`, renamed onto it when the block succeeds and removed if it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["atomic_path", "fmix64", "read_varint", "splitmix64", "temp_beside"]
