"""A tiny Hugging Face Llama checkpoint, with a tokenizer trained as Llama's is, built offline for tests."""

from __future__ import annotations

import io
from pathlib import Path

import sentencepiece as spm

TEXTS = [
    "The river flows past the old mill and under the stone bridge.",
    "河水流过老磨坊，从石桥下面穿过。",
    "Every morning the baker opens the shop at six o'clock.",
    "每天早上六点，面包师傅准时开门营业。",
    "def area(r):\n    return 3.14159 * r ** 2",
]


def llama_style_tokenizer(texts=TEXTS, vocab_size: int = 400) -> bytes:
    """A SentencePiece BPE model with Llama 2's settings: unk 0, bos 1, eos 2, no pad piece, a dummy
    "▁" prefix, identity normalization, byte fallback and split digits."""
    sink = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts) * 20), model_writer=sink, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    return sink.getvalue()


def tiny_hf_llama(folder: Path, vocab: int, tokenizer: bytes | None = None, seed: int = 11) -> Path:
    """A randomly initialized LlamaForCausalLM saved as a Hugging Face folder (with `tokenizer` as its
    tokenizer.model when given): no download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    if tokenizer is not None:
        (Path(folder) / "tokenizer.model").write_bytes(tokenizer)
    return Path(folder)
