"""Hugging Face export (lm_assets/training/export.py): LlamaForCausalLM and the tokenizer load it offline."""

import json
import os
import re

import pytest
import sentencepiece as spm
import torch
from safetensors.torch import load_file

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.training.config import from_preset
from lm_assets.training.export import (
    PROBE_TEXTS,
    build_hf_tokenizer,
    export_hf,
    export_tokenizer,
    hf_state_dict,
    native_state_dict,
)
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)

VOCAB = 320
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs!",
    "def f(x):\n    return x ** 2  # indentation\n",
    "Numbers like 12345 and 3.14159 are split into digits.",
    "Sphinx of black quartz, judge my vow.",
    "How vexingly quick daft zebras jump; the five boxing wizards jump quickly.",
] * 4
TEXTS = [*PROBE_TEXTS, "the lazy fox\n\n    returns 42", "Unseen: Ωμέγα, 東京, 🙂"]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    trained = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=VOCAB, num_threads=1), out)
    assert trained.vocab_size == VOCAB
    return trained.path


@pytest.fixture(scope="module")
def cfg():
    # Non-default rope_theta, GQA and eps, so a config field the loader ignored would change the logits.
    return from_preset("tiny", VOCAB, rope_theta=5_000.0, norm_eps=1e-6)


@pytest.fixture(scope="module")
def model(cfg):
    return Transformer(cfg, seed=7).eval()


@pytest.fixture(scope="module")
def exported(model, cfg, tokenizer_path, tmp_path_factory):
    return export_hf(model, cfg, tmp_path_factory.mktemp("hf"), tokenizer_model_path=tokenizer_path)


def hf_logits(path, x, **kwargs):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(path, **kwargs).eval()
    with torch.no_grad():
        return hf(x).logits


def test_llama_loads_with_the_same_logits(model, exported):
    x = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(hf_logits(exported, x), want, rtol=0, atol=1e-4)


def test_files_and_config_fields(cfg, exported):
    names = sorted(os.listdir(exported))
    assert names == sorted(["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                            "tokenizer.json", "tokenizer.model", "tokenizer_config.json"])  # fmt: skip
    config = json.loads((exported / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    expected = {"hidden_size": 64, "intermediate_size": cfg.ffn_hidden, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_hidden_layers": cfg.n_layers, "rms_norm_eps": 1e-6,
                "rope_theta": 5_000.0, "max_position_embeddings": cfg.max_seq_len, "vocab_size": VOCAB,
                "bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0, "tie_word_embeddings": False,
                "torch_dtype": "float32"}  # fmt: skip
    assert {k: config[k] for k in expected} == expected
    from transformers import AutoConfig

    loaded = AutoConfig.from_pretrained(exported)
    assert loaded.rope_parameters["rope_theta"] == 5_000.0 and loaded.num_key_value_heads == 2
    weights = load_file(exported / "model.safetensors")
    assert "model.layers.1.self_attn.k_proj.weight" in weights and "lm_head.weight" in weights
    assert weights["model.layers.1.self_attn.k_proj.weight"].shape == (2 * cfg.head_dim, cfg.dim)
    assert len(weights) == 3 + 9 * cfg.n_layers


def test_tied_and_bf16_exports(tmp_path):
    cfg = from_preset("tiny", VOCAB, tie_embeddings=True)
    model = Transformer(cfg, seed=1).eval()
    assert model.head.output.weight is model.embed.weight
    out = export_hf({"module." + k: v for k, v in model.state_dict().items()}, cfg, tmp_path / "tied")
    assert "lm_head.weight" not in load_file(out / "model.safetensors")
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is True
    x = torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf_logits(out, x), model(x), rtol=0, atol=1e-4)

    out = export_hf(model, cfg, tmp_path / "bf16", dtype=torch.bfloat16)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no temporary files left behind


def test_state_dict_names_round_trip_and_mismatches_are_refused(cfg, model):
    hf = hf_state_dict(model, cfg)
    native = Transformer(cfg, seed=None)
    native.load_state_dict(native_state_dict(hf))
    for name, tensor in model.state_dict().items():
        assert torch.equal(native.state_dict()[name], tensor), name
    state = dict(model.state_dict())
    del state["layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="missing"):
        hf_state_dict(state, cfg)
    with pytest.raises(ValueError, match="shape"):
        hf_state_dict(model, from_preset("tiny", VOCAB, ffn_hidden=192))


def test_tokenizer_loads_offline_and_matches_sentencepiece(exported, tokenizer_path):
    from transformers import AutoTokenizer, LlamaTokenizerFast

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    for tok in (AutoTokenizer.from_pretrained(exported), LlamaTokenizerFast.from_pretrained(exported)):
        assert (tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2, 3)
        for text in TEXTS:
            want = sp.encode(text)
            assert tok(text)["input_ids"] == want, text  # no BOS: training never saw one
            assert tok.decode(want) == sp.decode(want), text
        assert tok.encode("a\n\nb").count(4) == 2  # "\n" is one token of its own
    assert (exported / "tokenizer.model").read_bytes() == tokenizer_path.read_bytes()


def test_unsupported_sentencepiece_models_are_refused(tmp_path):
    prefix = tmp_path / "nfkc"
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES), model_prefix=str(prefix), vocab_size=120,
                                   model_type="bpe", minloglevel=2)  # fmt: skip
    with pytest.raises(ValueError, match="normalization"):
        build_hf_tokenizer(prefix.with_suffix(".model").read_bytes())
    with pytest.raises(ValueError, match="vocab_size"):
        export_tokenizer(prefix.with_suffix(".model"), tmp_path / "out", vocab_size=100)


NAN_THETA = {"rope_type": "default", "rope_theta": float("nan")}
LONG_CONTEXT = {"num_hidden_layers": 1000, "max_position_embeddings": 1 << 20}
HOSTILE_CONFIGS = {  # name: (what replaces config.json's settings, what the refusal says)
    "a string hidden size": (lambda c: c | {"hidden_size": "64"}, r"hidden_size must be an integer .*, got '64'"),
    "a list instead of an object": (lambda c: [c], "holds a JSON list, not an object"),
    "a million layers": (lambda c: c | {"num_hidden_layers": 10**6}, "num_hidden_layers must be an integer from 1 to"),
    "no vocabulary size": (lambda c: {k: v for k, v in c.items() if k != "vocab_size"}, "vocab_size is missing"),
    "heads given as true": (lambda c: c | {"num_attention_heads": True}, "num_attention_heads must be an integer"),
    "layers given as a float": (lambda c: c | {"num_hidden_layers": 2.0}, "num_hidden_layers must be an integer"),
    "rope parameters as a list": (lambda c: c | {"rope_parameters": [5000.0]}, "rope_parameters must be an object"),
    "a NaN rope theta": (lambda c: c | {"rope_parameters": NAN_THETA}, "rope_theta must be a finite positive number"),
    "a long context on every layer": (lambda c: c | LONG_CONTEXT, "RoPE tables"),
    "heads that do not divide the width": (lambda c: c | {"num_attention_heads": 3, "head_dim": None}, "multiple"),
    "not JSON": ("{", "is not valid JSON"),
    "nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
}


@pytest.mark.parametrize("case", list(HOSTILE_CONFIGS))
def test_a_hostile_config_json_is_refused_naming_the_file(exported, tmp_path, case):
    """Every reader of a Hugging Face folder's config.json: continued pretraining, its vocabulary check, and the
    evaluation loader."""
    import shutil

    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.training import hf_init
    from lm_assets.training.export import read_hf_config

    folder = tmp_path / "hf"
    shutil.copytree(exported, folder)
    change, refusal = HOSTILE_CONFIGS[case]
    settings = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(change if isinstance(change, str) else json.dumps(change(settings)))
    named = f"{folder / 'config.json'}: " if "JSON" not in refusal else f"{folder / 'config.json'} "
    for read in (read_hf_config, hf_init.model_config, lambda f: hf_init.model_vocabulary(f, VOCAB), load_model):
        with pytest.raises(ValueError, match=re.escape(named) + ".*" + refusal):
            read(folder)


def test_config_json_that_is_not_a_regular_file_or_too_large_is_refused_unread(exported, tmp_path):
    import shutil

    from lm_assets.training.export import read_hf_config

    folder = tmp_path / "hf"
    shutil.copytree(exported, folder)
    assert read_hf_config(folder)["num_hidden_layers"] == 2  # the export itself reads
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")  # opening it for reading would wait for a writer
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'config.json'} is not a regular file")):
        read_hf_config(folder)
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(" " * (2 << 20) + "{}")
    with pytest.raises(ValueError, match=re.escape(f"{folder / 'config.json'} holds") + ".* bytes"):
        read_hf_config(folder)
