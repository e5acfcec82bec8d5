"""Fine-tuning examples packed whole into fixed-length rows, with a loss mask beside the tokens.

Each example is followed by EOS, so the trainer's document masks (`document_mask`) keep examples from
attending to each other and restart positions at each one. Rows are filled best-fit decreasing (the
longest example first, into the fullest row it fits) and padded with PAD; EOS and PAD are never
scored. An example longer than a row (`seq_len - 1` tokens and its EOS) cannot be packed whole and
is returned as too long rather than cut. Examples go to train or val by a hash of their id, whatever
the seed, as the corpus packer splits documents.

The output is the packed layout `lm_assets.training.data.PackedDataset` reads: `<split>.bin` tokens,
`<split>_mask.bin` (one uint8 per token, 1 where the loss counts), `<split>_examples.parquet` (where
each example went) and `manifest.json`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl

SFT_SPLITS = ("train", "val")  # the fine-tuning and preference data's splits


def split_of(example_id: str, val_fraction: float) -> str:
    unit = int(hashlib.sha256(example_id.encode()).hexdigest()[:16], 16) / 2**64
    return "val" if unit < val_fraction else "train"


def best_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of `lengths` grouped into bins of `capacity`, best-fit decreasing (ties: earlier first)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fits = [b for b in range(len(bins)) if room[b] >= lengths[i]]
        if fits:
            b = min(fits, key=lambda b: (room[b], b))
        else:
            bins.append([])
            room.append(capacity)
            b = len(bins) - 1
        bins[b].append(i)
        room[b] -= lengths[i]
    return bins


def pack_examples(examples: list[tuple[str, np.ndarray, np.ndarray]], seq_len: int, eos_id: int, pad_id: int,
                  val_fraction: float = 0.1) -> tuple[dict, list[str]]:  # fmt: skip
    """`{split: (tokens [n, seq_len], mask [n, seq_len], placement frame)}` and the too-long example ids."""
    too_long = [eid for eid, ids, _ in examples if len(ids) + 1 > seq_len]
    out = {}
    for split in SFT_SPLITS:
        mine = [e for e in examples if len(e[1]) + 1 <= seq_len and split_of(e[0], val_fraction) == split]
        bins = best_fit([len(ids) + 1 for _, ids, _ in mine], seq_len)
        tokens = np.full((len(bins), seq_len), pad_id, dtype=np.int64)
        mask = np.zeros((len(bins), seq_len), dtype=np.uint8)
        placed = []
        for row, members in enumerate(bins):
            at = 0
            for i in members:
                eid, ids, scored = mine[i]
                tokens[row, at : at + len(ids)] = ids
                mask[row, at : at + len(ids)] = scored
                tokens[row, at + len(ids)] = eos_id
                placed.append({"example_id": eid, "seq_index": row, "seq_offset": at, "length": len(ids)})
                at += len(ids) + 1
        out[split] = (tokens, mask, pl.DataFrame(placed, schema={"example_id": pl.String, "seq_index": pl.Int64,
                                                                 "seq_offset": pl.Int64, "length": pl.Int64}))  # fmt: skip
    return out, too_long


def write_sft_packed(packed: dict, out_dir: str | Path, vocab_size: int, eos_id: int, pad_id: int, extra: dict) -> dict:
    """The packed layout (see the module docstring); returns the manifest, written last."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")
    manifest = {"format": "lm-assets-sft/1", "dtype": dtype.name, "byte_order": "little", "vocab_size": vocab_size,
                "eos_id": eos_id, "pad_id": pad_id, "splits": {}, "files": {}, **extra}  # fmt: skip
    seq_len = None
    for split, (tokens, mask, placed) in packed.items():
        seq_len = tokens.shape[1]
        tokens.astype(dtype).tofile(out / f"{split}.bin")
        mask.astype(np.uint8).tofile(out / f"{split}_mask.bin")
        placed.write_parquet(out / f"{split}_examples.parquet")
        manifest["splits"][split] = {"sequences": int(tokens.shape[0]), "examples": placed.height,
                                     "tokens": int((tokens != pad_id).sum()), "scored_tokens": int(mask.sum())}  # fmt: skip
        manifest["files"][split] = {"bin": f"{split}.bin", "loss_mask": f"{split}_mask.bin",
                                    "examples": f"{split}_examples.parquet"}  # fmt: skip
    manifest["seq_len"] = seq_len
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


# A preference row's side of each token: the chosen answer's scored tokens, the rejected answer's, or neither.
UNSCORED, CHOSEN, REJECTED = 0, 1, 2


def pack_pairs(pairs: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], seq_len: int, eos_id: int,
               pad_id: int, val_fraction: float = 0.1) -> tuple[dict, list[str]]:  # fmt: skip
    """Preference pairs `(pair_id, chosen ids, chosen mask, rejected ids, rejected mask)`, one pair to a
    row: the chosen conversation, EOS, the rejected one, EOS, then PAD (the document masks keep the two
    apart, so each is scored as if alone). Returns `{split: (tokens [n, seq_len], sides [n, seq_len],
    placement frame)}`, `sides` CHOSEN or REJECTED on each answer's scored tokens, and the ids of the
    pairs too long for a row."""
    fits = [p for p in pairs if len(p[1]) + len(p[3]) + 2 <= seq_len]
    too_long = [p[0] for p in pairs if len(p[1]) + len(p[3]) + 2 > seq_len]
    out = {}
    for split in SFT_SPLITS:
        mine = [p for p in fits if split_of(p[0], val_fraction) == split]
        tokens = np.full((len(mine), seq_len), pad_id, dtype=np.int64)
        sides = np.zeros((len(mine), seq_len), dtype=np.uint8)
        placed = []
        for row, (pid, chosen, chosen_mask, rejected, rejected_mask) in enumerate(mine):
            at = len(chosen) + 1
            tokens[row, : len(chosen)], tokens[row, len(chosen)] = chosen, eos_id
            tokens[row, at : at + len(rejected)], tokens[row, at + len(rejected)] = rejected, eos_id
            sides[row, : len(chosen)] = np.where(chosen_mask > 0, CHOSEN, UNSCORED)
            sides[row, at : at + len(rejected)] = np.where(rejected_mask > 0, REJECTED, UNSCORED)
            placed.append({"pair_id": pid, "seq_index": row, "chosen_length": len(chosen), "rejected_length": len(rejected)})
        out[split] = (tokens, sides, pl.DataFrame(placed, schema={"pair_id": pl.String, "seq_index": pl.Int64,
                                                                  "chosen_length": pl.Int64, "rejected_length": pl.Int64}))  # fmt: skip
    return out, too_long


def write_preference_packed(packed: dict, out_dir: str | Path, vocab_size: int, eos_id: int, pad_id: int,
                            extra: dict) -> dict:  # fmt: skip
    """`pack_pairs`' rows as `<split>.bin` tokens, `<split>_sides.bin` (one uint8 per token: 0, 1 chosen,
    2 rejected), `<split>_pairs.parquet` and `manifest.json`, written last; returns the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")
    manifest = {"format": "lm-assets-preference/1", "dtype": dtype.name, "byte_order": "little",
                "vocab_size": vocab_size, "eos_id": eos_id, "pad_id": pad_id, "sides": {"chosen": CHOSEN, "rejected": REJECTED},
                "splits": {}, "files": {}, **extra}  # fmt: skip
    for split, (tokens, sides, placed) in packed.items():
        manifest["seq_len"] = int(tokens.shape[1])
        tokens.astype(dtype).tofile(out / f"{split}.bin")
        sides.astype(np.uint8).tofile(out / f"{split}_sides.bin")
        placed.write_parquet(out / f"{split}_pairs.parquet")
        manifest["splits"][split] = {"pairs": placed.height, "sequences": int(tokens.shape[0]), "tokens": int((tokens != pad_id).sum()),
                                     "chosen_tokens": int((sides == CHOSEN).sum()),
                                     "rejected_tokens": int((sides == REJECTED).sum())}  # fmt: skip
        manifest["files"][split] = {"bin": f"{split}.bin", "sides": f"{split}_sides.bin", "pairs": f"{split}_pairs.parquet"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


__all__ = ["CHOSEN", "REJECTED", "SFT_SPLITS", "UNSCORED", "best_fit", "pack_examples", "pack_pairs", "split_of",
           "write_preference_packed", "write_sft_packed"]
