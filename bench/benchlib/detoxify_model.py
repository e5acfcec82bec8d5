"""A randomly initialised BERT in Detoxify's release checkpoint format: its speed is the real model's, its
scores mean nothing. For the toxicity speed bench (bert-base's shape) and the tests (a tiny one)."""

from __future__ import annotations

from pathlib import Path

DETOXIFY_CLASSES = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
# Detoxify's `original` model: bert-base-uncased.
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512}  # fmt: skip


def build_detoxify_checkpoint(folder: Path, words: list[str], shape: dict, name: str = "model") -> tuple[Path, Path]:
    """Write `<folder>/hf/` (config.json and a vocabulary of `words`) and `<folder>/<name>.ckpt`. Returns both."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    hf_dir = folder / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (hf_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 ignores vocab_file for BertTokenizer; vocab= is what loads the words.
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, model_max_length=shape["max_position_embeddings"])
    tokenizer.save_pretrained(hf_dir)
    config = BertConfig(vocab_size=len(vocab), num_labels=len(DETOXIFY_CLASSES), **shape)
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
    path = folder / f"{name}.ckpt"
    torch.save(checkpoint, path)
    return path, hf_dir
