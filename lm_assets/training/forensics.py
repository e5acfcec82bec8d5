"""What a spiked step trained on. When a step's loss is not finite or a spike, rank 0 appends to
`<checkpoint.dir>/spikes.jsonl` one line per sequence of the step's global batch (every data-parallel
rank's, every micro-batch's: the order is a function of the step alone, `lm_assets.training.data`), with a scan
of its tokens for what poisons a batch: a degenerate run (one token repeated `DEGENERATE_RUN` times,
or over half of a shorter sequence) and, when the tokenizer is known, characters no text should hold (control characters other
than tab and newline, U+FFFD replacement characters). The Dagster side joins the sequences to their
documents, URLs and WARC records through the packing stage's lineage.

Nothing here imports Dagster or lm_assets.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import numpy as np

DEGENERATE_RUN = 64
SPIKES_FILE = "spikes.jsonl"


def longest_run(tokens: np.ndarray) -> tuple[int, int]:
    """(token, length) of the longest run of one repeated token."""
    if tokens.size == 0:
        return -1, 0
    change = np.flatnonzero(np.diff(tokens)) + 1
    starts = np.concatenate(([0], change))
    lengths = np.diff(np.concatenate((starts, [tokens.size])))
    best = int(lengths.argmax())
    return int(tokens[starts[best]]), int(lengths[best])


def odd_characters(text: str) -> dict[str, int]:
    """Control characters (but tab, newline, carriage return) and U+FFFD replacement characters."""
    control = sum(1 for c in text if unicodedata.category(c) == "Cc" and c not in "\t\n\r")
    return {"control_chars": control, "replacement_chars": text.count("\ufffd")}


def scan(tokens: np.ndarray, decode=None) -> dict:
    token, run = longest_run(tokens)
    found = {"longest_run_token": token, "longest_run": run,
             "degenerate": run >= min(DEGENERATE_RUN, max(8, tokens.size // 2 + 1))}
    if decode is not None:
        found |= odd_characters(decode([int(t) for t in tokens]))
    return found


class SpikeForensics:
    """Appends what each spiked step trained on to `folder/spikes.jsonl` (rank 0 only)."""

    def __init__(self, folder: str | os.PathLike, dataset, split: str, grad_accum: int, dp: int, micro_batch_size: int,
                 tokenizer_model: str | None = None):
        self.path = Path(folder) / SPIKES_FILE
        self.dataset, self.split = dataset, split
        self.grad_accum, self.dp, self.micro_batch_size = grad_accum, dp, micro_batch_size
        self.decode = None
        if tokenizer_model and Path(tokenizer_model).exists():
            import sentencepiece as spm

            self.decode = spm.SentencePieceProcessor(model_file=str(tokenizer_model)).decode

    def sequences(self, step: int) -> list[dict]:
        """Every sequence of `step`'s global batch: its index, data-parallel rank and micro-batch."""
        rows = []
        for micro in range(self.grad_accum):
            for rank in range(self.dp):
                indices = self.dataset.batch_indices(step * self.grad_accum + micro, rank, self.dp, self.micro_batch_size)
                rows += [{"seq_index": int(i), "dp_rank": rank, "micro_batch": micro} for i in indices]
        return rows

    def record(self, step: int, reason: str, loss: float | None) -> int:
        """Write the step's sequences with their scans; returns how many."""
        rows = self.sequences(step)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as out:
            for row in rows:
                tokens = np.asarray(self.dataset[row["seq_index"]])
                line = {"step": step, "reason": reason, "loss": loss if loss is None or np.isfinite(loss) else str(loss),
                        "split": self.split, **row, **scan(tokens, self.decode)}
                out.write(json.dumps(line) + "\n")
        return len(rows)


def read_spikes(folder: str | os.PathLike) -> list[dict]:
    path = Path(folder) / SPIKES_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []
