"""Disjoint sets over 0..n-1, vectorised: the one union-find of dedup, in memory or memory-mapped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np


class UnionFind:
    """Disjoint sets over 0..n-1 in a parent array, in memory or memory-mapped at `path`; every root is
    its set's smallest member.

    Edges come in batches of numpy arrays. Within a batch, roots are hooked onto smaller roots
    (`np.minimum.at`) and the batch's nodes pointer-jump to their roots, until every edge of the batch
    has both ends in one set; so a long chain or a star takes a few vectorised rounds, not a Python
    loop per edge.
    """

    def __init__(self, n: int, path: str | Path | None = None, chunk: int = 1 << 22):
        self.n = n
        self.chunk = chunk
        self.dtype = np.int32 if n < 2**31 else np.int64
        if path is None:
            self.parent = np.empty(max(n, 1), dtype=self.dtype)
        else:
            self.parent = np.memmap(path, dtype=self.dtype, mode="w+", shape=(max(n, 1),))
        for lo in range(0, n, chunk):
            self.parent[lo : lo + chunk] = np.arange(lo, min(lo + chunk, n), dtype=self.dtype)

    @property
    def bytes_per_document(self) -> int:
        return np.dtype(self.dtype).itemsize

    def _find(self, nodes: np.ndarray) -> np.ndarray:
        """Roots of `nodes`, whose parents are then set to them."""
        parent = self.parent
        roots = parent[nodes]
        while True:
            above = parent[roots]
            if np.array_equal(above, roots):
                break
            roots = above
        parent[nodes] = roots
        return roots

    def _jump(self, nodes: np.ndarray) -> None:
        """Pointer doubling on `nodes` until each points at a root (log of the longest path rounds)."""
        parent = self.parent
        while True:
            up = parent[nodes]
            above = parent[up]
            if np.array_equal(up, above):
                return
            parent[nodes] = above

    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        a = np.asarray(a, dtype=self.dtype)
        b = np.asarray(b, dtype=self.dtype)
        while len(a):
            root_a, root_b = self._find(a), self._find(b)
            apart = root_a != root_b
            if not apart.any():
                return
            a, b, root_a, root_b = a[apart], b[apart], root_a[apart], root_b[apart]
            low, high = np.minimum(root_a, root_b), np.maximum(root_a, root_b)
            np.minimum.at(self.parent, high, low)
            self._jump(np.unique(np.concatenate([a, b, low, high])))

    def flatten(self) -> None:
        """Every element points at its root, by pointer doubling over the whole array in chunks."""
        parent = self.parent
        changed = True
        while changed:
            changed = False
            for lo in range(0, self.n, self.chunk):
                up = parent[lo : lo + self.chunk]
                above = parent[up]
                if not np.array_equal(up, above):
                    parent[lo : lo + self.chunk] = above
                    changed = True

    def members(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`(nodes, roots)` of every element that is not alone in its set, in chunks, after `flatten`;
        a root comes once per chunk holding a member of its set."""
        parent = self.parent
        for lo in range(0, self.n, self.chunk):
            roots = np.asarray(parent[lo : lo + self.chunk])
            nodes = np.arange(lo, lo + len(roots), dtype=self.dtype)
            linked = roots != nodes
            found = np.unique(roots[linked])
            yield np.concatenate([nodes[linked], found]), np.concatenate([roots[linked], found])

    def roots(self) -> np.ndarray:
        """Every element's root (its set's smallest member), as int64, after `flatten`."""
        self.flatten()
        return np.asarray(self.parent[: self.n]).astype(np.int64)
