"""KV-cached generation (lm_assets/evaluation/generation.py) against a full forward pass and transformers' generate."""

import os

import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.evaluation import load_model
from lm_assets.evaluation.generation import generate, next_token_scores
from lm_assets.training.config import from_preset
from lm_assets.training.export import EOS_ID, export_hf
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)

VOCAB = 320
MAX_LEN = 64
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was a small house by the river.",
    "今天天气很好，我们去公园散步。",
    "Numbers like 12345 and 3.14159 are split into digits.",
] * 4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tok = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=VOCAB, num_threads=1), tmp_path_factory.mktemp("tok"))
    cfg = from_preset("tiny", VOCAB, max_seq_len=MAX_LEN, rope_theta=5_000.0)  # GQA: 4 query heads, 2 kv heads
    return export_hf(Transformer(cfg, seed=5).eval(), cfg, tmp_path_factory.mktemp("hf"), tokenizer_model_path=tok.path)


@pytest.fixture(scope="module")
def model(exported):
    return load_model(exported).model


@pytest.fixture(scope="module")
def hf_model(exported):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(exported).eval()


def prompts(*lengths: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (n,), generator=g).tolist() for n in lengths]


def hf_continuation(hf_model, prompt: list[int], max_new_tokens: int, eos_id: int = EOS_ID) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                                eos_token_id=eos_id, pad_token_id=0)  # fmt: skip
    return out[0, len(prompt):].tolist()


def test_greedy_equals_transformers_generate_one_prompt_and_a_left_padded_batch(model, hf_model):
    batch = prompts(1, 7, 19, 12)
    want = [hf_continuation(hf_model, p, 24) for p in batch]
    assert [len(w) for w in want] == [24] * 4
    for prompt, expected in zip(batch, want):
        assert generate(model, [prompt], 24, eos_id=EOS_ID).tokens == [expected]
    together = generate(model, batch, 24, eos_id=EOS_ID)
    assert together.tokens == want
    assert together.prompt_lengths == [1, 7, 19, 12] and together.truncated == [False] * 4
    assert together.stopped_at_eos == [False] * 4


def test_a_continuation_ends_at_its_first_eos_as_in_transformers(model, hf_model):
    batch = prompts(5, 11, seed=1)
    free = generate(model, batch, 12).tokens
    eos = free[0][4]  # a token the first row makes at step 5: as EOS, that row stops there
    got = generate(model, batch, 12, eos_id=eos)
    assert got.tokens[0] == free[0][: free[0].index(eos) + 1]
    assert got.stopped_at_eos[0] is True
    for prompt, tokens in zip(batch, got.tokens):
        assert tokens == hf_continuation(hf_model, prompt, 12, eos_id=eos)
        assert (eos in tokens) == (tokens[-1] == eos)


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_cached_logits_equal_a_full_forward_at_every_step(model, sampled):
    batch = prompts(3, 16, 9, seed=2)
    settings = {"do_sample": True, "temperature": 1.3, "seed": 4} if sampled else {}
    got = generate(model, batch, 20, output_logits=True, **settings)
    assert len(got.logits) == 20
    for row, (prompt, tokens) in enumerate(zip(batch, got.tokens)):
        with torch.no_grad():
            full = model(torch.tensor([prompt + tokens]))[0]
        for step in range(20):
            torch.testing.assert_close(got.logits[step][row], full[len(prompt) - 1 + step], rtol=0, atol=1e-5)


def test_sampling_is_reproducible_and_top_k_one_is_greedy(model):
    batch = prompts(4, 13, seed=3)
    settings = {"do_sample": True, "temperature": 0.8, "top_p": 0.95}
    first = generate(model, batch, 24, seed=11, **settings).tokens
    assert generate(model, batch, 24, seed=11, **settings).tokens == first
    assert generate(model, batch, 24, seed=12, **settings).tokens != first
    assert first != generate(model, batch, 24).tokens  # a random model's distribution is wide: sampling leaves argmax
    top1 = generate(model, batch, 24, do_sample=True, temperature=0.7, top_k=1, seed=3).tokens
    assert top1 == generate(model, batch, 24).tokens


def test_temperature_top_k_and_top_p_filter_as_transformers_does():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    for temperature, top_k, top_p in [(1.0, None, 0.9), (0.7, 10, None), (1.5, 20, 0.5), (0.8, None, 0.95), (1.0, 1, 1.0)]:
        want = TemperatureLogitsWarper(temperature)(None, logits.clone())
        if top_k is not None:
            want = TopKLogitsWarper(top_k)(None, want)
        if top_p is not None:
            want = TopPLogitsWarper(top_p)(None, want)
        got = next_token_scores(logits, temperature, top_k, top_p)
        assert torch.equal(torch.isinf(got), torch.isinf(want)), (temperature, top_k, top_p)
        torch.testing.assert_close(got[~torch.isinf(got)], want[~torch.isinf(want)])
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = [int(torch.isfinite(next_token_scores(probs, 1.0, None, p)).sum()) for p in (0.4, 0.75, 0.85, 0.99)]
    assert kept == [1, 2, 3, 4]


def test_long_prompts_keep_their_last_tokens_and_impossible_lengths_are_refused(model):
    long, short = prompts(MAX_LEN + 10, 6, seed=4)
    got = generate(model, [long, short], 8)
    assert got.truncated == [True, False] and got.prompt_lengths == [MAX_LEN - 8, 6]
    assert got.tokens == [generate(model, [long[-(MAX_LEN - 8):]], 8).tokens[0], generate(model, [short], 8).tokens[0]]
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, [short], MAX_LEN)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, [short, []], 4)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, [short], 4, do_sample=True, temperature=0.0)


def test_generation_imports_no_dagster():
    import subprocess
    import sys

    code = "import sys, lm_assets.evaluation.generation; sys.exit('dagster' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_sample_continuations_decode_what_generate_made(exported):
    from lm_assets.evaluation import SAMPLE_PROMPTS, SampleSettings, sample_continuations
    from lm_assets.evaluation.samples import shown_text

    em = load_model(exported)
    settings = SampleSettings(max_new_tokens=10, temperature=0.9, top_p=0.9, seed=1)
    result = sample_continuations(em, SAMPLE_PROMPTS, settings)
    rows = result["samples"]
    assert [r["prompt"] for r in rows] == list(SAMPLE_PROMPTS) and len(SAMPLE_PROMPTS) == 6
    prompt_ids = [em.encode(p) for p in SAMPLE_PROMPTS]
    greedy = generate(em.model, prompt_ids, 10, eos_id=em.tokenizer.eos_id())
    sampled = generate(em.model, prompt_ids, 10, do_sample=True, temperature=0.9, top_p=0.9, seed=1,
                       eos_id=em.tokenizer.eos_id())  # fmt: skip
    assert [r["greedy_ids"] for r in rows] == greedy.tokens and [r["sampled_ids"] for r in rows] == sampled.tokens
    for row, ids in zip(rows, prompt_ids):
        assert row["prompt_tokens"] == len(ids) and row["prompt_truncated"] is False
        for kind in ("greedy", "sampled"):
            assert shown_text(em.tokenizer, ids) + row[kind] == shown_text(em.tokenizer, ids + row[f"{kind}_ids"])
            ended_at_eos = row[f"{kind}_ids"][-1:] == [em.tokenizer.eos_id()]
            assert row[f"{kind}_stop"] == ("eos" if ended_at_eos else "length")
    assert result["settings"] == {"max_new_tokens": 10, "temperature": 0.9, "top_p": 0.9, "top_k": None, "seed": 1}
    assert result["new_tokens"] == sum(len(t) for t in greedy.tokens + sampled.tokens)
    assert sample_continuations(em, SAMPLE_PROMPTS, settings)["samples"] == rows
