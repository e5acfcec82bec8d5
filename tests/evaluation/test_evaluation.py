"""lm_assets.evaluation: lm-eval-harness prompts, log-likelihood scoring, batching, perplexity, statistics."""

import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn.functional as F

from lm_assets.corpus.decontam.contamination import load_ceval, load_mmlu
from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.evaluation import (
    MMLU_CATEGORIES,
    ceval_questions,
    chance_interval,
    encode_pair,
    evaluate_ceval,
    evaluate_mmlu,
    load_model,
    loglikelihood,
    loglikelihood_tokens,
    mean_stderr,
    mmlu_questions,
    packed_perplexity,
    pooled_sample_stderr,
    score_questions,
    summarize,
    token_byte_lengths,
)
from lm_assets.evaluation.scoring import BatchStats, encode_requests
from lm_assets.evaluation.stats import binomial_band, binomial_quantile
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
MMLU_ZIP = ROOT / "data" / "eval" / "mmlu.zip"
CEVAL_SAMPLE = ROOT / "data" / "eval" / "ceval-sample"
VOCAB = 320
MAX_LEN = 256  # short enough that 5-shot MMLU prompts are cut from the left
SENTENCES = [
    "The following are multiple choice questions (with answers) about abstract algebra.",
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.",
    "Statement 1 | Every element of a group generates a cyclic subgroup of the group.",
    "Which of the following is true? Answer: A, B, C or D.",
    "The quick brown fox jumps over the lazy dog. The capital of France is Paris.",
    "Numbers like 12345 and 3.14159 are split into digits.",
] * 4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tok = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=VOCAB, num_threads=1), tmp_path_factory.mktemp("tok"))
    cfg = from_preset("tiny", VOCAB, max_seq_len=MAX_LEN, rope_theta=5_000.0)
    model = Transformer(cfg, seed=3).eval()
    return export_hf(model, cfg, tmp_path_factory.mktemp("hf"), tokenizer_model_path=tok.path), model


@pytest.fixture(scope="module")
def em(exported):
    return load_model(exported[0])


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def test_load_model_rebuilds_our_transformer_from_the_hf_export(exported, em, tmp_path):
    path, original = exported
    assert em.max_length == MAX_LEN and em.cfg.rope_theta == 5_000.0 and em.cfg.n_kv_heads == 2
    x = torch.randint(0, VOCAB, (2, 50), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(em.model(x), original(x))
    assert em.encode("Answer: B") == em.tokenizer.encode("Answer: B")  # no BOS added
    assert em.tokenizer.bos_id() not in em.encode("Hello")

    cfg = from_preset("tiny", VOCAB, tie_embeddings=True)
    tied = Transformer(cfg, seed=1).eval()
    out = export_hf(tied, cfg, tmp_path / "tied", tokenizer_model_path=path / "tokenizer.model")
    loaded = load_model(out, dtype=torch.bfloat16)
    assert loaded.dtype == torch.bfloat16 and loaded.model.layers[0].attn.rope_cos.dtype == torch.float32
    assert torch.equal(loaded.model.head.output.weight, loaded.model.embed.weight)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x).float(), tied(x), atol=0.1, rtol=0.05)


def test_hf_tokenizer_as_lm_eval_calls_it_gives_our_ids(exported, em):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(exported[0])
    prompts = [q.context for q in mmlu_questions(MMLU_ZIP, subjects=["abstract_algebra"])[:2]]
    prompts += [q.context for q in ceval_questions(CEVAL_SAMPLE)[:2]]
    for prompt in prompts:
        for text in (prompt, prompt + " A"):
            assert hf.encode(text, add_special_tokens=False) == em.encode(text)


# ---------------------------------------------------------------------------------------------
# Prompts (golden strings written by hand)
# ---------------------------------------------------------------------------------------------

MMLU_ABSTRACT_ALGEBRA_TEST_0 = (
    "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
    "Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If H and K are "
    "subgroups of G then HK is a subgroup of G.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\n"
    "Answer: B\n\n"
    "Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The symmetric "
    "group S_10 has 10 elements.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: C\n\n"
    "Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every subgroup of "
    "an abelian group is abelian.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: A\n\n"
    "Find the characteristic of the ring 2Z.\nA. 0\nB. 3\nC. 12\nD. 30\nAnswer: A\n\n"
    "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\nA. 0\nB. 4\nC. 2\nD. 6\n"
    "Answer:"
)

MMLU_NUTRITION_TEST_49_ZERO_SHOT = (  # the question is "IBS\n" in the file: stripped, as lm-eval does
    "The following are multiple choice questions (with answers) about nutrition.\n\n"
    "IBS\nA. Is primarily a psychological problem\nB. Is a contra-indication to colonoscopy\n"
    "C. May be associated with constipation\nD. always resolves with a gluten free diet.\nAnswer:"
)

CEVAL_PHYSICS_VAL_0 = (
    "以下是中国关于高中物理的单项选择题，请选出其中的正确答案。\n\n"
    "在国际单位制中，力的单位是\nA. 焦耳\nB. 瓦特\nC. 牛顿\nD. 帕斯卡\n答案： C\n\n"
    "一个物体从静止开始做自由落体运动（g 取 10 m/s²），下落 2 s 时的速度大小为\n"
    "A. 10 m/s\nB. 20 m/s\nC. 30 m/s\nD. 40 m/s\n答案： B\n\n"
    "真空中的光速约为\nA. 3×10⁵ m/s\nB. 3×10⁶ m/s\nC. 3×10⁸ m/s\nD. 3×10¹⁰ m/s\n答案： C\n\n"
    "某电阻两端的电压为 6 V，通过它的电流为 2 A，该电阻的阻值为\nA. 3 Ω\nB. 4 Ω\nC. 8 Ω\nD. 12 Ω\n答案： A\n\n"
    "下列物理量中，属于矢量的是\nA. 质量\nB. 时间\nC. 速度\nD. 温度\n答案： C\n\n"
    "质量为 2 kg 的物体受到 10 N 的合外力作用，其加速度大小为\n"
    "A. 0.2 m/s²\nB. 5 m/s²\nC. 12 m/s²\nD. 20 m/s²\n答案："
)


def test_mmlu_prompts_are_lm_eval_harness_strings():
    questions = mmlu_questions(MMLU_ZIP)
    assert len(questions) == 14_042 and {q.shots for q in questions} == {5}
    assert len({q.subject for q in questions}) == 57 == len(MMLU_CATEGORIES)
    first = next(q for q in questions if q.subject == "abstract_algebra")
    assert first.context == MMLU_ABSTRACT_ALGEBRA_TEST_0
    assert (first.task, first.index, first.gold, first.continuations) == (
        "mmlu_abstract_algebra", 0, 1, [" A", " B", " C", " D"])  # fmt: skip

    zero = mmlu_questions(MMLU_ZIP, num_fewshot=0, subjects=["nutrition"])[49]
    assert zero.context == MMLU_NUTRITION_TEST_49_ZERO_SHOT and zero.gold == 2 and zero.shots == 0

    # lm-eval's sampler leaves a question out of its own shots only when it scores the shot split
    # itself: a val question equal to a dev shot keeps all five shots, a dev question loses itself.
    val = mmlu_questions(MMLU_ZIP, split="val", subjects=["college_physics"])
    assert {q.shots for q in val} == {5}
    dev = mmlu_questions(MMLU_ZIP, split="dev", subjects=["college_physics"])
    assert max(q.shots for q in dev) == 4  # five dev questions, less the one asked
    assert all(q.context.count("\nAnswer:") == q.shots + 1 for q in dev)
    with pytest.raises(ValueError, match="6-shot needs 6 dev questions"):
        mmlu_questions(MMLU_ZIP, num_fewshot=6, subjects=["anatomy"])
    with pytest.raises(KeyError):
        mmlu_questions(MMLU_ZIP, subjects=["astrology"])


def test_ceval_prompts_and_subject_names(tmp_path):
    questions = ceval_questions(CEVAL_SAMPLE)
    assert len(questions) == 15 and {q.task for q in questions} == {
        "ceval-valid_computer_network", "ceval-valid_high_school_geography", "ceval-valid_high_school_physics"}  # fmt: skip
    physics = [q for q in questions if q.subject == "high_school_physics"]
    assert physics[0].context == CEVAL_PHYSICS_VAL_0 and physics[0].gold == 1

    zero = ceval_questions(CEVAL_SAMPLE, num_fewshot=0, subjects=["computer_network"])[3]
    assert zero.context == (
        "以下是中国关于计算机网络的单项选择题，请选出其中的正确答案。\n\n"
        "ping 命令所使用的协议是\nA. ICMP\nB. IGMP\nC. ARP\nD. RARP\n答案："
    )
    # Names from a mapping file in the official subject_mapping.json layout, or a plain dict.
    mapping = tmp_path / "subject_mapping.json"
    mapping.write_text(json.dumps({"computer_network": ["Computer Network", "网络", "STEM"]}, ensure_ascii=False))
    named = ceval_questions(CEVAL_SAMPLE, num_fewshot=0, subjects=["computer_network"], subject_names=mapping)
    assert named[0].context.startswith("以下是中国关于网络的单项选择题")
    named = ceval_questions(CEVAL_SAMPLE, num_fewshot=0, subjects=["high_school_physics"],
                            subject_names={"high_school_physics": "物理"})
    assert named[0].context.startswith("以下是中国关于物理的单项选择题")
    # A subject with no known name is described by its code.
    renamed = load_ceval(CEVAL_SAMPLE).with_columns(pl.lit("my_subject").alias("subject"))
    assert ceval_questions(renamed, num_fewshot=0)[0].context.startswith("以下是中国关于my_subject的单项选择题")
    with pytest.raises(ValueError, match="answer"):
        ceval_questions(CEVAL_SAMPLE, split="test")  # the test split has no answers


def test_zip_and_folder_layouts_give_the_same_questions(tmp_path):
    subjects = ["astronomy", "virology"]
    folder = tmp_path / "mmlu" / "data"
    with zipfile.ZipFile(MMLU_ZIP) as archive:
        for name in archive.namelist():
            if any(f"/{s}_" in name for s in subjects):
                (folder / name.split("/")[1]).mkdir(parents=True, exist_ok=True)
                (folder / name.split("/", 1)[1]).write_bytes(archive.read(name))
    assert mmlu_questions(tmp_path / "mmlu") == mmlu_questions(MMLU_ZIP, subjects=subjects)
    assert load_mmlu(tmp_path / "mmlu").height == 2 * 5 + 16 + 18 + 152 + 166  # dev, val, test

    packed = tmp_path / "ceval.zip"
    with zipfile.ZipFile(packed, "w") as archive:
        for file in sorted(CEVAL_SAMPLE.rglob("*.csv")):
            archive.write(file, "ceval-exam/" + file.relative_to(CEVAL_SAMPLE).as_posix())
    assert ceval_questions(packed) == ceval_questions(CEVAL_SAMPLE)


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def lm_eval_loglikelihood_tokens(model_call, max_length, ctx, cont):
    """lm-evaluation-harness's `_loglikelihood_tokens` for one request, batch size 1."""
    inp = torch.tensor((ctx + cont)[-(max_length + 1) :][:-1], dtype=torch.long)[None]
    with torch.no_grad():
        logits = F.log_softmax(model_call(inp), dim=-1)[0]
    inplen, contlen = inp.shape[1], len(cont)
    logits = logits[inplen - contlen : inplen]
    cont_t = torch.tensor(cont, dtype=torch.long)
    return float(torch.gather(logits, 1, cont_t[:, None]).squeeze(-1).sum()), bool((logits.argmax(-1) == cont_t).all())


def lm_eval_loglikelihood(model_call, encode, max_length, context, continuation, prefix_token_id=2):
    """lm-evaluation-harness's HFLM `loglikelihood` path for one request, written out step by step."""
    if context == "":
        ctx, cont = [prefix_token_id], encode(continuation)
    else:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        whole, ctx = encode(context + continuation), encode(context)
        cont = whole[len(ctx) :]
    return lm_eval_loglikelihood_tokens(model_call, max_length, ctx, cont)


def test_encode_pair_moves_trailing_whitespace_to_the_continuation(em):
    ctx, cont = encode_pair(em.encode, "Answer: \n", "B")
    assert ctx == em.encode("Answer:")
    whole = em.encode("Answer: \nB")
    assert cont == whole[len(ctx) :] and ctx + cont == whole
    assert encode_requests(em, "Answer: \n", ["B", "C"])[0] == (ctx, cont)
    assert encode_requests(em, "", ["hello"]) == [([em.prefix_token_id], em.encode("hello"))]


def test_loglikelihood_equals_a_log_softmax_computed_by_hand(em):
    q = mmlu_questions(MMLU_ZIP, num_fewshot=0, subjects=["nutrition"])[49]
    scored = score_questions(em, [q])[0]
    assert not scored["truncated"]
    for choice, ll in zip("ABCD", scored["loglikelihoods"]):
        ctx, cont = encode_pair(em.encode, q.context, " " + choice)
        assert ctx + cont == em.encode(q.context + " " + choice) and len(ctx + cont) <= MAX_LEN
        with torch.no_grad():
            logits = em.model(torch.tensor([ctx + cont]))[0].double().tolist()
        want = 0.0
        for k, token in enumerate(cont):  # position len(ctx) - 1 + k predicts cont[k]
            row = logits[len(ctx) - 1 + k]
            top = max(row)
            want += row[token] - top - math.log(sum(math.exp(x - top) for x in row))
        assert ll == pytest.approx(want, abs=5e-6)
    assert scored["pred"] == int(np.argmax(scored["loglikelihoods"])) == scored["pred_norm"]
    assert scored["acc"] == float(scored["pred"] == q.gold) == scored["acc_norm"]


def scoring_requests():
    mmlu = mmlu_questions(MMLU_ZIP, subjects=["abstract_algebra", "nutrition"])
    questions = mmlu[:3] + mmlu[-2:] + ceval_questions(CEVAL_SAMPLE)[:4]
    requests = [(q.context, c) for q in questions for c in q.continuations]
    requests += [
        ("The capital of France is", " Paris"),
        ("The capital of France is", " Paris, France"),  # its row extends the one above
        ("The capital of France is", " Lyon"),
        ("Trailing spaces  ", "x y z"),
        ("", "An empty context"),
        ("Statement 1 | " * 60, " True, True"),  # a context far longer than max_length
        ("A", " long continuation " * 9),
    ]
    return requests


def test_batched_scoring_matches_unbatched_and_hf_llama(exported, em, monkeypatch):
    from transformers import LlamaForCausalLM

    from lm_assets.evaluation import scoring

    requests = scoring_requests()
    reference = [lm_eval_loglikelihood(em.model, em.encode, MAX_LEN, c, x) for c, x in requests]
    batched = loglikelihood(em, requests, max_batch_size=5, max_batch_tokens=600)
    plain = loglikelihood(em, requests, share=False, max_batch_size=1)
    monkeypatch.setattr(scoring, "HEAD_CHUNK", 7)  # the output head over scored positions in pieces
    chunked = loglikelihood(em, requests, max_batch_size=8)
    monkeypatch.undo()
    for got in (batched, plain, chunked):
        assert [g for _, g in got] == [g for _, g in reference]
        np.testing.assert_allclose([ll for ll, _ in got], [ll for ll, _ in reference], rtol=0, atol=2e-5)
    hf = LlamaForCausalLM.from_pretrained(exported[0]).eval()
    with_hf = [lm_eval_loglikelihood(lambda x: hf(x).logits, em.encode, MAX_LEN, c, x) for c, x in requests]
    np.testing.assert_allclose([ll for ll, _ in batched], [ll for ll, _ in with_hf], rtol=0, atol=1e-4)

    # Token-level requests: one-token continuations of shared contexts (one row per context).
    encoded = [encode_requests(em, c, [x])[0] for c, x in requests]
    assert loglikelihood_tokens(em, encoded, groups=[c for c, _ in requests], max_batch_size=3) == batched
    contexts = [encoded[0][0], encoded[-2][0], em.encode("The capital of France is")]
    single = [(ctx, [token]) for ctx in contexts for token in (4, 17, 99, 250)]
    stats = BatchStats()
    got = loglikelihood_tokens(em, single, stats=stats)
    want = [lm_eval_loglikelihood_tokens(em.model, MAX_LEN, ctx, cont) for ctx, cont in single]
    assert [g for _, g in got] == [g for _, g in want] and (stats.requests, stats.rows) == (12, 3)
    np.testing.assert_allclose([ll for ll, _ in got], [ll for ll, _ in want], rtol=0, atol=2e-5)
    stats = BatchStats()
    loglikelihood(em, requests[-7:-4], stats=stats)  # " Paris" is read off the " Paris, France" row
    assert (stats.requests, stats.rows) == (3, 2)
    stats = BatchStats()
    questions = mmlu_questions(MMLU_ZIP, subjects=["abstract_algebra"])[:6]
    score_questions(em, questions, stats=stats)
    assert (stats.requests, stats.rows) == (24, 6)


def test_mmlu_and_ceval_results(em):
    result = evaluate_mmlu(em, MMLU_ZIP, subjects=["abstract_algebra", "philosophy", "virology"], limit=4,
                           details=True)  # fmt: skip
    assert result["overall"]["n"] == 12 and result["truncated"] == 12 and result["num_fewshot"] == 5
    assert set(result["categories"]) == {"stem", "humanities", "other"}
    entry = result["subjects"]["virology"]
    assert (entry["task"], entry["category"], entry["n"], entry["shots"]) == ("mmlu_virology", "other", 4, 5)
    rows = [r for r in result["questions"] if r["subject"] == "virology"]
    assert entry["acc"] == sum(r["acc"] for r in rows) / 4
    assert entry["acc_stderr"] == pytest.approx(mean_stderr([r["acc"] for r in rows]), nan_ok=True)
    low, high = chance_interval(12)
    assert (result["overall"]["chance_low"], result["overall"]["chance_high"]) == (low, high)

    ceval = evaluate_ceval(em, CEVAL_SAMPLE, num_fewshot=2)
    assert ceval["benchmark"] == "ceval" and ceval["split"] == "val" and ceval["overall"]["n"] == 15
    assert set(ceval["subjects"]) == {"computer_network", "high_school_geography", "high_school_physics"}
    # Categories come from the shipped C-Eval mapping; the overall still pools the subjects, as lm-eval's ceval-valid.
    assert {name: group["n"] for name, group in ceval["categories"].items()} == {"STEM": 10, "Social Science": 5}
    assert ceval["subjects"]["high_school_geography"]["category"] == "Social Science"
    assert json.loads(json.dumps(ceval)) == ceval


def test_summarize_follows_lm_eval_aggregation():
    def rows(subject, accs):
        return [{"subject": subject, "task": f"mmlu_{subject}", "acc": a, "acc_norm": a, "truncated": False}
                for a in accs]  # fmt: skip

    scored = rows("anatomy", [1, 0, 1, 1]) + rows("astronomy", [0, 0, 1]) + rows("philosophy", [1, 1])
    out = summarize(scored, MMLU_CATEGORIES, ("stem", "humanities"))
    # anatomy: mean 3/4, sample sd 1/2, se 1/4; astronomy: mean 1/3, sd sqrt(1/3), se 1/3; philosophy: se 0.
    assert out["subjects"]["anatomy"]["acc_stderr"] == pytest.approx(0.25)
    assert out["subjects"]["astronomy"]["acc_stderr"] == pytest.approx(1 / 3)
    stem = out["categories"]["stem"]
    # pooled: ((4-1)*4*(1/4)^2 + (3-1)*3*(1/3)^2) / (7-2) = 17/60, se^2 = 17/60/7 = 17/420
    assert (stem["n"], stem["acc"], stem["subjects"]) == (7, pytest.approx(4 / 7), 2)
    assert stem["acc_stderr"] == pytest.approx(math.sqrt(17 / 420))
    assert out["categories"]["humanities"]["acc_stderr"] == 0
    # mmlu = pooled over the categories: (7-1)*7*17/420 / (9-2) = 17/70, se^2 = 17/630
    assert out["overall"]["acc"] == pytest.approx(6 / 9)
    assert out["overall"]["acc_stderr"] == pytest.approx(math.sqrt(17 / 630))
    assert pooled_sample_stderr([0.25, 1 / 3], [4, 3]) == pytest.approx(math.sqrt(17 / 420))


def test_chance_interval():
    # Binomial(n, 1/4) quantiles at 0.15% and 99.85%, over n.
    assert chance_interval(100) == (0.13, 0.38)
    assert chance_interval(14_042) == pytest.approx((0.23921, 0.26086), abs=1e-5)
    assert chance_interval(50, n_choices=2, level=0.95) == (0.36, 0.64)
    with pytest.raises(ValueError):
        chance_interval(0)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 30])
@pytest.mark.parametrize("p", [0.0, 0.001, 0.02, 0.25, 0.5, 0.98, 0.999, 1.0])
def test_the_chance_band_stays_inside_the_unit_interval(n, p):
    low, high = binomial_band(p, n)
    assert 0.0 <= low <= high <= 1.0
    assert low * n == int(low * n) and high * n == int(high * n)  # accuracies a run of n questions can score


def test_the_chance_band_is_exact_on_a_few_questions():
    # 8 two-choice questions: even 8/8 (probability 1/256 > 0.15%) is inside; p ± 3 se gave -0.03–1.03.
    assert chance_interval(8, n_choices=2) == (0.0, 1.0)
    # at 95%, 8/8 is beyond it (1/256 < 2.5%), 7/8 (9/256 > 2.5%) not
    assert chance_interval(8, n_choices=2, level=0.95) == (0.125, 0.875)
    assert binomial_quantile(10, 0.5, 0.5) == 5


# ---------------------------------------------------------------------------------------------
# Perplexity and bits per byte
# ---------------------------------------------------------------------------------------------

PPL_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Find the characteristic of the ring 2Z.\nAnswer: A",
    "Statement 1 | Every element of a group generates a cyclic subgroup.",
    "Numbers like 12345 are split into digits.",
]


def write_packed(path: Path, rows: np.ndarray) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "val.bin").write_bytes(rows.astype("<u2").tobytes())
    manifest = {"dtype": "uint16", "seq_len": rows.shape[1], "pad_id": 0, "eos_id": 3,
                "splits": {"val": {"sequences": rows.shape[0]}}}  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_perplexity_and_bits_per_byte_equal_a_direct_computation(em, tmp_path):
    stream = [t for text in PPL_TEXTS for t in em.encode(text) + [3]]
    seq_len = 24
    stream += [0] * (-len(stream) % seq_len)  # the last row padded
    rows = np.array(stream, dtype=np.int64).reshape(-1, seq_len)
    write_packed(tmp_path / "packed", rows)

    got = packed_perplexity(em, tmp_path / "packed", batch_size=3)
    inputs, targets = torch.tensor(rows[:, :-1]), torch.tensor(rows[:, 1:])
    targets = targets.masked_fill(targets == 0, -100)
    with torch.no_grad():
        nll = F.cross_entropy(em.model(inputs).flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
    n_tokens = int((targets != -100).sum())
    n_bytes = sum(len(em.tokenizer.decode([t for t in row[1:].tolist() if t != 0]).encode("utf-8")) for row in rows)
    assert (got["sequences"], got["tokens"], got["bytes"]) == (rows.shape[0], n_tokens, n_bytes)
    assert got["nll"] == pytest.approx(float(nll), rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(float(nll) / n_tokens), rel=1e-5)
    assert got["bits_per_byte"] == pytest.approx(float(nll) / (math.log(2) * n_bytes), rel=1e-5)
    assert packed_perplexity(em, tmp_path / "packed", max_sequences=1)["tokens"] == int((targets[0] != -100).sum())


def test_token_bytes_are_the_decoded_text_bytes(em):
    text = "Mixed 中文 text, emoji 🙂 and\nnew lines  with spaces."
    ids = em.encode(text) + [3] + em.encode(" more")
    assert any(em.tokenizer.is_byte(i) for i in ids)  # CJK and emoji fall back to byte pieces here
    table = token_byte_lengths(em.tokenizer, em.cfg.vocab_size)
    assert int(table[ids].sum()) == len(em.tokenizer.decode(ids).encode("utf-8")) == len((text + " more").encode())
    assert table[0] == table[2] == table[3] == 0  # pad, bos, eos


def test_package_has_no_dagster_import():
    import subprocess
    import sys

    code = "import sys, lm_assets.evaluation; sys.exit('dagster' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0

