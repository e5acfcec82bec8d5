"""Names that become paths: shard keys, run names, checkpoint tags and storage keys.

Partition keys come from outside (anyone who can add a dynamic partition, a file dropped in the
landing location), so each is checked before it is joined onto a root: one path component, no
`..`, nothing absolute, no control characters.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import PurePosixPath

CHECKPOINT_TAG = re.compile(r"step_\d{8}")


class UnsafeKeyError(ValueError):
    """A name that would read or write outside its root, or that no file could safely carry."""


def _control_character(name: str) -> str | None:
    return next((c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be one file or folder name under a root, or None when it can."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if (c := _control_character(name)) is not None:
        return f"it contains the control character U+{ord(c):04X}"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if name in (".", ".."):
        return "it names a folder, not a file"
    if name.startswith("."):
        return "it starts with a dot (hidden and temporary files are not shards)"
    if len(name.encode()) > 255:
        return "it is longer than a file name may be (255 bytes)"
    return None


def check_name(name: str, what: str = "shard key") -> str:
    """`name` itself when it is one safe path component; UnsafeKeyError naming the problem otherwise."""
    problem = name_problem(name)
    if problem:
        raise UnsafeKeyError(f"{what} {name!r} is refused: {problem}. A {what} must be a single file or folder name.")
    return name


def check_checkpoint_key(key: str) -> tuple[str, str]:
    """`<run>-<tag>` -> (run, tag), both checked; the tag is `step_` and eight digits."""
    run, sep, tag = key.rpartition("-")
    if not sep or not CHECKPOINT_TAG.fullmatch(tag):
        raise UnsafeKeyError(f"checkpoint key {key!r} is refused: it is not `<run>-step_<8 digits>`")
    return check_name(run, "run name"), tag


def confined_path(root: str | os.PathLike, key: str) -> str:
    """`root/key` as a normalized path, refused (UnsafeKeyError) unless it lies inside `root`.

    The test is on the names, not on the disk: symlinks an operator places under the root are theirs
    to trust, and the key itself can never climb out (`..`, an absolute path, a drive)."""
    if not isinstance(key, str):
        raise UnsafeKeyError(f"storage key {key!r} is refused: it is not a string")
    if (c := _control_character(key)) is not None:
        raise UnsafeKeyError(f"storage key {key!r} is refused: it contains the control character U+{ord(c):04X}")
    if "\\" in key or key.startswith("/") or ".." in PurePosixPath(key).parts:
        raise UnsafeKeyError(f"storage key {key!r} is refused: it would leave the storage root {str(root)!r}")
    root = os.path.normpath(os.fspath(root))
    path = os.path.normpath(os.path.join(root, key)) if key else root
    if os.path.commonpath([root, path]) != root:
        raise UnsafeKeyError(f"storage key {key!r} is refused: it would leave the storage root {root!r}")
    return path


def landing_files(keys: list[str], suffixes: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """Split a landing listing into shard files and the files skipped, each with the reason."""
    shards, skipped = [], {}
    for key in keys:
        if "/" in key:
            folder = key.split("/", 1)[0] + "/"
            skipped[folder] = "a folder; only files at the top of the landing location are shards"
        elif problem := name_problem(key):
            skipped[key] = problem
        elif not key.lower().endswith(suffixes):
            skipped[key] = f"not a shard format ({', '.join(suffixes)})"
        else:
            shards.append(key)
    return shards, skipped
