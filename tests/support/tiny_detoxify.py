"""Builds a tiny random BERT checkpoint in Detoxify's release format, for offline tests."""

from __future__ import annotations

from pathlib import Path

DETOXIFY_CLASSES = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
WORDS = ["you", "are", "a", "stupid", "idiot", "the", "cat", "sat", "on", "mat", "nice", "day", "shut", "up"]


def build_tiny_detoxify(folder: Path) -> tuple[Path, Path]:
    """Write `<folder>/hf/` (config.json + vocab) and `<folder>/tiny.ckpt`. Returns both paths."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    hf_dir = folder / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (hf_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 ignores vocab_file for BertTokenizer; vocab= is what loads the words.
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})
    tokenizer.save_pretrained(hf_dir)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=len(DETOXIFY_CLASSES),
    )
    config.save_pretrained(hf_dir)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    checkpoint = {
        "config": {
            "arch": {
                "args": {
                    "model_type": str(hf_dir),
                    "model_name": "BertForSequenceClassification",
                    "tokenizer_name": "BertTokenizer",
                    "num_classes": len(DETOXIFY_CLASSES),
                }
            },
            "dataset": {"args": {"classes": DETOXIFY_CLASSES}},
        },
        "state_dict": model.state_dict(),
    }
    path = folder / "tiny.ckpt"
    torch.save(checkpoint, path)
    return path, hf_dir
