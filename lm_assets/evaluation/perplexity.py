"""Perplexity and bits per byte on a packed split (`lm_assets.training.data.PackedDataset`, e.g. `val`).

Each row of `seq_len` tokens is read as in training: `inputs = row[:-1]`, `targets = row[1:]`, and
targets equal to the manifest's `pad_id` are not scored. Every other target is: text tokens and the
EOS that ends each document (the model is trained to predict it). The first token of each row is
context only. Rows are scored whole, in file order, with no overlap between rows, so a row's first
positions see little context, as in training; this is the validation loss of the training run.

- `nll`: the summed negative log-likelihood of the scored targets, in nats (float64 accumulation of
  float32 cross-entropies);
- `perplexity = exp(nll / tokens)`;
- `bits_per_byte = nll / (ln 2 * bytes)`, where `bytes` is the UTF-8 length of the text the scored
  targets decode to. It is counted per token (`token_byte_lengths`): a normal or user-defined piece
  counts the UTF-8 bytes of its text ("▁" read as a space), a byte-fallback piece `<0x..>` one byte,
  control pieces (EOS, BOS, PAD) none. With the project's tokenizer (no dummy prefix) this is exactly
  `len(tokenizer.decode(targets).encode("utf-8"))` for targets that decode to valid UTF-8, and it
  stays exact where a row boundary splits a multi-byte character into byte pieces (decoding those
  alone would count replacement characters). Bits per byte, unlike perplexity, does not depend on
  the tokenizer, so runs with different vocabularies compare.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

from lm_assets.evaluation.checkpoint import EvalModel
from lm_assets.evaluation.scoring import hidden_states
from lm_assets.training.data import PackedDataset

HEAD_CHUNK = 4_096


def token_byte_lengths(tokenizer: spm.SentencePieceProcessor, vocab_size: int | None = None) -> np.ndarray:
    """UTF-8 bytes each token id stands for (int64, length `vocab_size`; ids past the tokenizer's: 0)."""
    n = tokenizer.get_piece_size()
    out = np.zeros(max(n, vocab_size or 0), dtype=np.int64)
    for i in range(n):
        if tokenizer.is_control(i):
            continue
        if tokenizer.is_byte(i):
            out[i] = 1
        elif tokenizer.is_unknown(i):
            out[i] = len(tokenizer.decode([i]).encode("utf-8"))
        else:
            out[i] = len(tokenizer.id_to_piece(i).replace("\u2581", " ").encode("utf-8"))
    return out


@torch.inference_mode()
def packed_perplexity(
    em: EvalModel,
    packed_dir: str | os.PathLike,
    split: str = "val",
    *,
    batch_size: int = 8,
    max_sequences: int | None = None,
) -> dict:
    """Token perplexity and bits per byte of `em` on `split` of a packed directory:

    `{"split", "sequences", "tokens", "bytes", "nll", "nll_per_token", "perplexity", "bits_per_byte",
      "bytes_per_token", "seconds"}` (see the module docstring). `max_sequences` scores only the
    first rows (file order).
    """
    start = time.perf_counter()
    data = PackedDataset(packed_dir, split)
    if data.seq_len - 1 > em.max_length:
        raise ValueError(f"rows of {data.seq_len} tokens need max_length >= {data.seq_len - 1}, the model has "
                         f"{em.max_length}")  # fmt: skip
    n = len(data) if max_sequences is None else min(len(data), max_sequences)
    byte_table = torch.from_numpy(token_byte_lengths(em.tokenizer, em.cfg.vocab_size))
    nll, tokens, nbytes = 0.0, 0, 0
    for lo in range(0, n, batch_size):
        rows = torch.from_numpy(np.asarray(data.data[lo : min(n, lo + batch_size)], dtype=np.int64))
        inputs, targets = rows[:, :-1], rows[:, 1:]
        keep = targets != data.pad_id
        hidden = hidden_states(em.model, inputs.to(em.device))[keep.to(em.device)]
        wanted = targets[keep]
        for s in range(0, wanted.numel(), HEAD_CHUNK):
            logits = em.model.head(hidden[s : s + HEAD_CHUNK])
            target = wanted[s : s + HEAD_CHUNK].to(logits.device)
            nll += float(F.cross_entropy(logits.float(), target, reduction="sum"))
        tokens += int(wanted.numel())
        nbytes += int(byte_table[wanted].sum())
    return {
        "split": split,
        "sequences": n,
        "tokens": tokens,
        "bytes": nbytes,
        "nll": nll,
        "nll_per_token": nll / tokens if tokens else math.nan,
        "perplexity": math.exp(nll / tokens) if tokens else math.nan,
        "bits_per_byte": nll / (math.log(2) * nbytes) if nbytes else math.nan,
        "bytes_per_token": nbytes / tokens if tokens else math.nan,
        "seconds": time.perf_counter() - start,
    }


@torch.inference_mode()
def sequence_losses(
    em: EvalModel, rows: Callable[[int, int], np.ndarray], n: int, pad_id: int, *, batch_size: int = 8
) -> np.ndarray:
    """Each row's mean loss under `em` (nats per scored target, float32; rows scored as in training,
    as `packed_perplexity` scores them; a row with no scored target gets 0). `rows(lo, hi)` gives rows
    `[lo, hi)` of `seq_len` tokens, e.g. `PackedResult.sequences` for a split: a reference model's
    difficulty score for a perplexity curriculum."""
    out = np.zeros(n, dtype=np.float32)
    for lo in range(0, n, batch_size):
        batch = torch.from_numpy(np.asarray(rows(lo, min(n, lo + batch_size)), dtype=np.int64))
        if batch.shape[1] - 1 > em.max_length:
            raise ValueError(f"rows of {batch.shape[1]} tokens need max_length >= {batch.shape[1] - 1}, the model "
                             f"has {em.max_length}")  # fmt: skip
        inputs, targets = batch[:, :-1], batch[:, 1:]
        keep = targets != pad_id
        hidden = hidden_states(em.model, inputs.to(em.device))[keep.to(em.device)]
        wanted, row_of = targets[keep], keep.nonzero()[:, 0]
        nll = torch.zeros(len(batch), dtype=torch.float64)
        for s in range(0, wanted.numel(), HEAD_CHUNK):
            logits = em.model.head(hidden[s : s + HEAD_CHUNK])
            loss = F.cross_entropy(logits.float(), wanted[s : s + HEAD_CHUNK].to(logits.device), reduction="none")
            nll.index_add_(0, row_of[s : s + HEAD_CHUNK], loss.double().cpu())
        counts = keep.sum(dim=1)
        out[lo : lo + len(batch)] = torch.where(counts > 0, nll / counts.clamp(min=1), 0.0).numpy()
    return out


__all__ = ["packed_perplexity", "sequence_losses", "token_byte_lengths"]
