"""Training batches from packed sequences, addressed by step number alone.

Reads the output of the packing stage (numpy and torch only, no pipeline imports):

- `manifest.json`: at least `dtype` (`uint16`/`uint32`), `seq_len`, `pad_id` and
  `splits.<split>.sequences`;
- `<split>.bin`: `[sequences, seq_len]` tokens of that dtype, little-endian, no header.

Order. `batch_indices` is a pure function of `(n_sequences, seed, step, dp_rank, dp_size,
micro_batch_size)`. The sequences are read as an endless stream of epochs; epoch `e` is a
permutation of `range(n_sequences)` keyed by `seed + e`. The global batch of step `s` is the stream
positions `[s*G, (s+1)*G)` with `G = micro_batch_size * dp_size` (a batch may run across an epoch
boundary), and data-parallel rank `r` takes the contiguous slice
`[s*G + r*micro_batch_size, s*G + (r+1)*micro_batch_size)`. Resuming at step k therefore yields
exactly the batches of an uninterrupted run, with no loader state beyond the step number, and the
ranks of a step partition its global batch.

The permutation is a 4-round Feistel network over the next power of four >= n_sequences with
cycle-walking back into range (expected < 4 rounds per index): a bijection computed per index, so
a batch costs O(batch) time and no per-epoch memory, and it is integer arithmetic that no library
upgrade can change.

Curriculum. When the packer scored the train split's sequences (`manifest["curriculum"]`, a
`train_difficulty.bin` of little-endian float32 per sequence), epoch 0 follows `curriculum_order`
instead: a seeded `fraction` of the sequences easiest first, then the rest in the seeded permutation;
later epochs are plain permutations. It is still a function of the step alone, so resuming is exact.

Inputs and targets. A row of `seq_len` tokens gives `inputs = row[:-1]` and `targets = row[1:]`
(`seq_len - 1` positions; packing with `seq_len = context + 1` gives full-context rows). Targets
equal to `pad_id` are replaced by -100 (`ignore_index` of `torch.nn.functional.cross_entropy`).
Fine-tuning data (`files.<split>.loss_mask`: a `<split>_mask.bin` of one uint8 per token) scores only
the targets whose mask is 1, the assistant's tokens; the rest become -100 too. Preference data
(`files.<split>.sides`: a `<split>_sides.bin` of one uint8 per token, 0 unscored, 1 chosen, 2 rejected;
a pair to a row) scores the answers' tokens, and `rows` also gives each target's side.
The packer writes an EOS after every document; with `document_mask` the trainer derives each
row's document ids from those (`lm_assets.training.kernels.document_ids`) and attention stays within
documents.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from lm_assets.training.primitives import splitmix64

IGNORE_INDEX = -100
_U64 = np.uint64
_ROUNDS = 4


def _round_keys(seed: int) -> list[np.uint64]:
    base = splitmix64(np.array([seed % (1 << 64)], dtype=_U64))
    return list(splitmix64(base ^ np.arange(1, _ROUNDS + 1, dtype=_U64)))


def permute(indices: np.ndarray, n: int, seed: int) -> np.ndarray:
    """The seeded permutation of `range(n)` evaluated at `indices` (each in `[0, n)`)."""
    if n <= 0:
        raise ValueError("cannot permute an empty range")
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    half = max(1, ((n - 1).bit_length() + 1) // 2)  # domain 4**half >= n
    mask = _U64((1 << half) - 1)
    shift = _U64(half)
    keys = _round_keys(seed)

    def feistel(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & mask
        for k in keys:
            left, right = right, left ^ (splitmix64(right ^ k) & mask)
        return (left << shift) | right

    out = feistel(idx.astype(_U64))
    todo = np.flatnonzero(out >= _U64(n))
    while todo.size:  # cycle-walk: a bijection of the domain, restricted to [0, n)
        out[todo] = feistel(out[todo])
        todo = todo[out[todo] >= _U64(n)]
    return out.astype(np.int64)


def curriculum_order(difficulty: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """The first epoch's order under an easy-to-hard curriculum: a seeded draw of `fraction` of the
    sequences, easiest first (ties in seeded order), then every other sequence in the seeded permutation.
    Each sequence appears once, and the order is a function of (difficulty, fraction, seed) alone."""
    n = len(difficulty)
    drawn = permute(np.arange(n), n, seed)  # the seeded permutation of epoch 0
    k = int(round(fraction * n))
    head = drawn[:k]
    head = head[np.lexsort((np.arange(k), np.asarray(difficulty)[head]))]  # stable: ties keep the seeded order
    return np.concatenate([head, drawn[k:]]).astype(np.int64)


def batch_indices(
    n_sequences: int, seed: int, step: int, dp_rank: int, dp_size: int, micro_batch_size: int,
    first_epoch: np.ndarray | None = None,
) -> np.ndarray:
    """Sequence indices of rank `dp_rank`'s micro-batch at `step` (see the module docstring); with
    `first_epoch` (`curriculum_order`), epoch 0 follows it instead of the seeded permutation."""
    if n_sequences <= 0:
        raise ValueError("no sequences to draw from")
    if not 0 <= dp_rank < dp_size:
        raise ValueError(f"dp_rank {dp_rank} out of range for dp_size {dp_size}")
    if micro_batch_size <= 0 or step < 0:
        raise ValueError("micro_batch_size must be positive and step non-negative")
    start = step * micro_batch_size * dp_size + dp_rank * micro_batch_size
    positions = np.arange(start, start + micro_batch_size, dtype=np.int64)
    epochs = positions // n_sequences
    within = positions % n_sequences
    out = np.empty(micro_batch_size, dtype=np.int64)
    for epoch in np.unique(epochs).tolist():
        m = epochs == epoch
        out[m] = first_epoch[within[m]] if epoch == 0 and first_epoch is not None else permute(
            within[m], n_sequences, seed + epoch)
    return out


class PackedDataset:
    """One split of a packed directory, memory-mapped read-only.

    `dataset[i]` is row i (numpy, the on-disk dtype); `get_batch` gives model-ready tensors.
    `seed` keys the epoch permutations (independent of the packing seed).
    """

    def __init__(self, path: str | os.PathLike, split: str = "train", seed: int = 0):
        self.path = Path(path)
        self.split = split
        self.seed = seed
        self.manifest = json.loads((self.path / "manifest.json").read_text())
        self.seq_len = int(self.manifest["seq_len"])
        self.pad_id = int(self.manifest["pad_id"])
        self.dtype = np.dtype(self.manifest["dtype"]).newbyteorder("<")
        try:
            n = int(self.manifest["splits"][split]["sequences"])
        except KeyError:
            raise KeyError(f"split {split!r} not in {self.path / 'manifest.json'}") from None
        file = self.path / self.manifest.get("files", {}).get(split, {}).get("bin", f"{split}.bin")
        expected = n * self.seq_len * self.dtype.itemsize
        size = file.stat().st_size
        if size != expected:
            raise ValueError(f"{file} has {size} bytes; the manifest implies {expected}")
        self.data = (
            np.memmap(file, dtype=self.dtype, mode="r", shape=(n, self.seq_len))
            if n
            else np.zeros((0, self.seq_len), dtype=self.dtype)
        )
        # Fine-tuning data says which tokens are scored: a uint8 0/1 per token, 1 where the loss counts.
        mask_name = self.manifest.get("files", {}).get(split, {}).get("loss_mask")
        self.loss_mask = None
        if mask_name:
            mask_file = self.path / mask_name
            if mask_file.stat().st_size != n * self.seq_len:
                raise ValueError(f"{mask_file} has {mask_file.stat().st_size} bytes; the manifest implies {n * self.seq_len}")
            self.loss_mask = np.memmap(mask_file, dtype=np.uint8, mode="r", shape=(n, self.seq_len)) if n else None
        # Preference data (a pair to a row) says which answer each scored token belongs to.
        sides_name = self.manifest.get("files", {}).get(split, {}).get("sides")
        self.sides = None
        if sides_name:
            sides_file = self.path / sides_name
            if sides_file.stat().st_size != n * self.seq_len:
                raise ValueError(f"{sides_file} has {sides_file.stat().st_size} bytes; the manifest implies {n * self.seq_len}")
            self.sides = np.memmap(sides_file, dtype=np.uint8, mode="r", shape=(n, self.seq_len)) if n else None
        # An easy-to-hard curriculum the packer scored this split for (train only): the first epoch's order.
        self.curriculum = self.manifest.get("curriculum") if split == "train" else None
        self.first_epoch = None
        if self.curriculum and n:
            scores = self.path / self.manifest["files"][split]["difficulty"]
            difficulty = np.fromfile(scores, dtype="<f4")
            if difficulty.shape != (n,):
                raise ValueError(f"{scores} holds {difficulty.size} scores for {n} sequences")
            self.first_epoch = curriculum_order(difficulty, float(self.curriculum["fraction"]), seed)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> np.ndarray:
        return self.data[index]

    def steps_per_epoch(self, dp_size: int, micro_batch_size: int) -> int:
        """Whole global batches in one epoch (batches keep going across the boundary regardless)."""
        return len(self) // (dp_size * micro_batch_size)

    def batch_indices(self, step: int, dp_rank: int, dp_size: int, micro_batch_size: int) -> np.ndarray:
        return batch_indices(len(self), self.seed, step, dp_rank, dp_size, micro_batch_size, self.first_epoch)

    def get_batch(
        self, step: int, dp_rank: int, dp_size: int, micro_batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(inputs, targets)`, int64 tensors of shape `[micro_batch_size, seq_len - 1]`."""
        return self.rows(self.batch_indices(step, dp_rank, dp_size, micro_batch_size))[:2]

    def rows(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """`(inputs, targets, sides)` of rows `idx`; `sides` (preference data only, else None) is the side
        of each target: 0 unscored, 1 the chosen answer's, 2 the rejected answer's."""
        idx = np.asarray(idx, dtype=np.int64)
        rows = self._read(self.data, idx, np.int64)
        inputs = rows[:, :-1]
        targets = rows[:, 1:].copy()
        targets[targets == self.pad_id] = IGNORE_INDEX
        scored = self.loss_mask if self.loss_mask is not None else self.sides
        if scored is not None:
            targets[self._read(scored, idx, np.uint8)[:, 1:] == 0] = IGNORE_INDEX
        sides = None
        if self.sides is not None:
            sides = torch.from_numpy(np.ascontiguousarray(self._read(self.sides, idx, np.int64)[:, 1:]))
        return torch.from_numpy(np.ascontiguousarray(inputs)), torch.from_numpy(targets), sides

    def _read(self, array: np.ndarray, idx: np.ndarray, dtype) -> np.ndarray:
        order = np.argsort(idx, kind="stable")  # read the memmap in file order
        out = np.empty((len(idx), self.seq_len), dtype=dtype)
        out[order] = array[idx[order]]
        return out


class StepPrefetcher:
    """The batches of steps `start`, `start + 1`, ... made ahead by `num_workers` background threads, at
    most `depth` steps ahead of the one asked for, so that reading and slicing the memory map overlaps
    the previous step's compute. `get(step)` returns that step's batches and the seconds the caller
    waited for them. With `num_workers=0` each step's batches are made when asked for."""

    def __init__(self, make, start: int, num_workers: int, depth: int = 2):
        from concurrent.futures import ThreadPoolExecutor

        self.make, self.next, self.depth = make, start, max(1, depth)
        self.pool = ThreadPoolExecutor(num_workers, thread_name_prefix="batches") if num_workers > 0 else None
        self.pending: dict = {}
        if self.pool is not None:
            for step in range(start, start + self.depth):
                self.pending[step] = self.pool.submit(make, step)

    def get(self, step: int) -> tuple[list, float]:
        if step != self.next:
            raise ValueError(f"batches are made in step order: asked for step {step}, the next is {self.next}")
        started = time.perf_counter()
        if self.pool is None:
            batches = self.make(step)
        else:
            batches = self.pending.pop(step).result()
            self.pending[step + self.depth] = self.pool.submit(self.make, step + self.depth)
        self.next = step + 1
        return batches, time.perf_counter() - started

    def close(self) -> None:
        if self.pool is not None:
            for future in self.pending.values():
                future.cancel()
            self.pool.shutdown(wait=True)
            self.pool = None
