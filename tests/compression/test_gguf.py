"""GGUF files of our checkpoints: read back by transformers with our logits, the vocabulary and chat
markers as llama.cpp needs them, and the int8 variant's costs measured."""

import numpy as np
import pytest
import torch

from lm_assets.compression.gguf_file import CHAT_MARKERS, rope_permuted, write_gguf
from lm_assets.sft.chat import CHAT_TEMPLATE, chat_tokenizer

TEXTS = ["The river flows past the old mill and under the stone bridge.", "河水流过老磨坊，从石桥下面穿过。",
         "Every morning the baker opens the shop at six o'clock.", "def area(r):\n    return 3.14159 * r ** 2"] * 30


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A chat checkpoint of 64-wide layers (Q8_0 blocks fit every matrix but the 176-wide down projection)."""
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import CHAT_TEMPLATE_NAME, export_hf
    from lm_assets.training.model import Transformer

    folder = tmp_path_factory.mktemp("gguf")
    tok = train_tokenizer(TEXTS, TokenizerConfig(vocab_size=400, num_threads=1), folder / "tok")
    model, _ = chat_tokenizer(tok.path.read_bytes())
    chat = folder / "chat" / "tokenizer.model"
    chat.parent.mkdir()
    chat.write_bytes(model)
    (chat.parent / CHAT_TEMPLATE_NAME).write_text(CHAT_TEMPLATE)
    cfg = from_preset("tiny", 416, max_seq_len=128)
    net = Transformer(cfg, seed=3).eval()
    # Trained-looking weights: not the near-zero init, so that errors would show. Seeded, so that the greedy
    # tokens compared below are the same in every process, whatever ran before in it.
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0, 0.1, generator=generator)
    export_hf(net, cfg, folder / "hf", tokenizer_model_path=chat)
    return folder / "hf"


def our_logits(export, ids):
    from lm_assets.evaluation.checkpoint import load_model

    with torch.no_grad():
        return load_model(export).model(torch.tensor([ids]))


def test_rope_permutation_interleaves_each_heads_halves():
    rows = np.arange(8)[:, None].repeat(2, 1)  # 2 heads of 4 rows: (0 1 | 2 3), (4 5 | 6 7)
    assert rope_permuted(rows, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_f16_and_q8_read_back_by_transformers_give_our_logits_and_greedy_text(export, tmp_path):
    from transformers import AutoModelForCausalLM

    from lm_assets.evaluation.checkpoint import load_model

    em = load_model(export)
    ids = em.encode("The river flows past the old mill. 河水流过老磨坊。")
    ours = our_logits(export, ids)
    for kind, tolerance in (("F32", 1e-4), ("F16", 1e-2), ("Q8_0", 0.1)):
        written = write_gguf(export, tmp_path / f"m-{kind}.gguf", kind)
        model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=written.path.name, dtype=torch.float32).eval()
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits
        assert (theirs - ours).abs().max().item() <= tolerance, kind
        assert theirs.argmax(-1).tolist() == ours.argmax(-1).tolist(), kind  # the same greedy text
    assert written.kept_f16 == ("blk.0.ffn_down.weight", "blk.1.ffn_down.weight")  # 176 columns: no blocks of 32
    sizes = {kind: (tmp_path / f"m-{kind}.gguf").stat().st_size for kind in ("F32", "F16", "Q8_0")}
    assert sizes["Q8_0"] < sizes["F16"] < sizes["F32"]


def test_the_vocabulary_chat_markers_and_template_are_in_the_file(export, tmp_path):
    import gguf
    import sentencepiece as spm
    from transformers import AutoTokenizer

    written = write_gguf(export, tmp_path / "m.gguf", "F16")
    reader = gguf.GGUFReader(written.path)
    field = reader.fields.__getitem__
    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode() for i in field("tokenizer.ggml.tokens").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    sp = spm.SentencePieceProcessor(model_file=str(export / "tokenizer.model"))
    assert tokens[: sp.get_piece_size()] == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert len(tokens) == 416 and all(t.startswith("[PAD") for t in tokens[sp.get_piece_size():])  # padded to the embedding
    assert {types[sp.piece_to_id(m)] for m in CHAT_MARKERS} == {int(gguf.TokenType.CONTROL)}
    template = bytes(field("tokenizer.chat_template").parts[-1]).decode()
    assert template == CHAT_TEMPLATE
    assert bool(field("tokenizer.ggml.add_space_prefix").parts[-1][0]) is False
    # transformers' reader keeps each marker one token, as our tokenizer does, on a chat prompt.
    theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file="m.gguf")
    prompt = "<|user|>\nWhat is 2 + 2?<|end|>\n<|assistant|>\n"
    assert theirs.encode(prompt, add_special_tokens=False) == sp.encode(prompt)


def write_packed_val(folder, em, seq_len: int = 24):
    from tests.evaluation.test_evaluation import write_packed

    stream = [t for text in TEXTS[:8] for t in em.encode(text) + [3]]
    stream += [0] * (-len(stream) % seq_len)
    write_packed(folder, np.array(stream).reshape(-1, seq_len))
    return folder


def test_each_variant_is_written_loaded_back_and_costed(export, tmp_path):
    from lm_assets.compression.costs import baseline_figures, variant_costs
    from lm_assets.compression.variants import folder_bytes, load_variant, write_variants
    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.tasks import TASKS, load_task

    variants = write_variants(export, tmp_path / "compressed")
    assert [v.kind for v in variants] == ["gguf-f16", "gguf-q8_0", "int8"]
    assert (tmp_path / "compressed" / "int8" / "model.safetensors").exists()
    base = load_model(export)
    packed = write_packed_val(tmp_path / "packed", base)
    questions = {"arc_easy": load_task(TASKS["arc_easy"], "data/eval/tasks/arc/ARC-Easy", 0, 10)}
    prompts = ["The river flows", "def area(r):"]
    baseline = baseline_figures(base, packed, questions, prompts, new_tokens=4)
    for variant in variants:
        em = load_variant(variant, export)
        costs = variant_costs(base, variant, em, packed, questions, prompts, base_bytes=folder_bytes(export),
                              baseline=baseline, new_tokens=4)  # fmt: skip
        assert costs["bytes"] == folder_bytes(variant.path) and costs["base_perplexity"] == baseline["perplexity"]
        assert abs(costs["perplexity_change"]) < {"gguf-f16": 1e-3, "gguf-q8_0": 2e-2, "int8": 2e-2}[variant.kind]
        assert costs["benchmarks"]["arc_easy"]["questions"] == len(questions["arc_easy"])
        assert 0 <= costs["changed_share"] <= 1
        # A GGUF's speed is llama.cpp's to measure; read back here it runs as float32.
        assert (costs["tokens_per_s"] is None) == (variant.kind.startswith("gguf-") and not has_llama_cpp())
    int8 = load_variant(variants[2], export)
    assert type(int8.model.layers[0].attn.q_proj.weight).__name__ == "Int8Tensor"
    assert folder_bytes(variants[1].path) < folder_bytes(variants[0].path) < folder_bytes(export)


def has_llama_cpp() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None
