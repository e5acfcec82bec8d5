"""Builds a tiny random BERT checkpoint in Detoxify's release format, for offline tests."""

from __future__ import annotations

from pathlib import Path

from benchlib.detoxify_model import build_detoxify_checkpoint

WORDS = ["you", "are", "a", "stupid", "idiot", "the", "cat", "sat", "on", "mat", "nice", "day", "shut", "up"]
TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
        "max_position_embeddings": 64}  # fmt: skip


def build_tiny_detoxify(folder: Path) -> tuple[Path, Path]:
    """Write `<folder>/hf/` (config.json + vocab) and `<folder>/tiny.ckpt`. Returns both paths."""
    return build_detoxify_checkpoint(folder, WORDS, TINY, name="tiny")
