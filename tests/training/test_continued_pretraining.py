"""Continued pretraining on an adopted, extended tokenizer: the model grows, the export round-trips."""

import os
from dataclasses import replace

import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, adopt_tokenizer, load_tokenizer, train_tokenizer
from tests.support.tiny_llama import TEXTS, llama_style_tokenizer, tiny_hf_llama
from lm_assets.training.export import export_hf
from lm_assets.training.hf_init import extend_vocabulary, load_into, model_config, model_vocabulary, weights
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)
TERMS = ["Kubernetes", "deepspeed"]


@pytest.fixture
def checkpoint(tmp_path):
    base = llama_style_tokenizer()
    return tiny_hf_llama(tmp_path / "llama", load_tokenizer(base).get_piece_size(), base), base


def test_an_extended_vocabulary_grows_the_model_by_mean_rows_and_the_export_round_trips(checkpoint, tmp_path):
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder, base = checkpoint
    n = load_tokenizer(base).get_piece_size()
    adopted = adopt_tokenizer(folder, TERMS)
    tokenizer_model = tmp_path / "tokenizer.model"
    tokenizer_model.write_bytes(adopted.model)
    vocab = model_vocabulary(folder, adopted.vocab_size, tokenizer_model)
    assert vocab == n + 2
    cfg = replace(model_config(folder), vocab_size=vocab)
    original = weights(folder)
    ours = Transformer(cfg, seed=0).eval()
    load_into(ours, extend_vocabulary(original, vocab), cfg, pipeline=False, tp=1, tp_rank=0)
    for name, table in (("embed.weight", ours.embed.weight), ("head.output.weight", ours.head.output.weight)):
        assert torch.equal(table[:n], original[name])
        assert torch.allclose(table[n:], original[name].mean(dim=0).expand(2, -1))

    theirs = LlamaForCausalLM.from_pretrained(folder).eval()
    old_ids = torch.tensor([load_tokenizer(base).encode(TEXTS[0])])
    with torch.no_grad():
        grown, before = ours(old_ids), theirs(old_ids).logits
    assert torch.allclose(grown[..., :n], before, atol=1e-5)  # the old pieces' logits are unchanged
    assert torch.allclose(grown[..., n:], before.mean(dim=-1, keepdim=True).expand(-1, -1, 2), atol=1e-5)

    out = export_hf(ours, cfg, tmp_path / "hf", tokenizer_model_path=tokenizer_model)
    exported = LlamaForCausalLM.from_pretrained(out).eval()
    assert exported.config.vocab_size == n + 2
    assert (exported.config.bos_token_id, exported.config.eos_token_id, exported.config.pad_token_id) == (1, 2, 0)
    text = "deploy Kubernetes with deepspeed by the river"
    ids = AutoTokenizer.from_pretrained(out)(text)["input_ids"]
    assert ids == adopted.processor().encode(text) and n in ids and n + 1 in ids
    with torch.no_grad():
        assert torch.allclose(exported(torch.tensor([ids])).logits, ours(torch.tensor([ids])), atol=1e-5)


def test_data_from_another_tokenizer_is_refused(checkpoint, tmp_path):
    folder, base = checkpoint
    n = load_tokenizer(base).get_piece_size()
    ours = train_tokenizer(TEXTS * 10, TokenizerConfig(vocab_size=n, num_threads=1), tmp_path / "ours")
    with pytest.raises(ValueError, match=r"not the one of init_from .*\(id 0 is '<unk>' there, '<pad>' here\)"):
        model_vocabulary(folder, n, ours.path)
    # Without both tokenizer files nothing shows the ids agree: only an equal size is taken.
    assert model_vocabulary(folder, n) == n
    with pytest.raises(ValueError, match=f"a vocabulary of {n} pieces, the data {n + 2}"):
        model_vocabulary(folder, n + 2)
