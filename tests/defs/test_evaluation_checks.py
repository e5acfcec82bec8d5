"""The benchmark checks: range, count, and the warning for an untrained model above chance."""

import math

import dagster as dg

from lm_assets.defs.evaluation.assets import benchmark_selection
from lm_assets.defs.evaluation.common import score_checks
from lm_assets.evaluation.stats import question_blind_chance


def result(acc: float, n: int = 400, truncated: int = 0) -> dict:
    low, high = 0.25 - 3 * math.sqrt(0.25 * 0.75 / n), 0.25 + 3 * math.sqrt(0.25 * 0.75 / n)
    overall = {"n": n, "acc": acc, "acc_norm": acc, "chance_low": low, "chance_high": high}
    return {"overall": overall, "subjects": {"s": {"acc": acc, "acc_norm": acc}}, "truncated": truncated, "max_length": 2048}


def by_name(checks: list[dg.AssetCheckResult]) -> dict:
    return {c.check_name: c.passed for c in checks}


def test_checks_pass_for_a_plausible_score():
    assert by_name(score_checks(result(0.27), expected=400, loss=3.0, vocab_size=32000)) == {
        "scores_in_unit_interval": True, "prompts_fit_the_context": True, "all_questions_scored": True,
        "chance_while_untrained": True,
    }


def test_more_than_five_percent_truncated_prompts_warn():
    assert by_name(score_checks(result(0.27, truncated=20), expected=400, loss=3.0, vocab_size=32000))["prompts_fit_the_context"]
    checks = score_checks(result(0.27, truncated=21), expected=400, loss=3.0, vocab_size=32000)
    warning = next(c for c in checks if c.check_name == "prompts_fit_the_context")
    assert warning.passed is False and warning.severity == dg.AssetCheckSeverity.WARN
    assert warning.metadata["share"].value == 0.0525  # no checkpoint given: no run prefix


def test_out_of_range_and_missing_questions_fail():
    checks = by_name(score_checks(result(1.2), expected=401, loss=3.0, vocab_size=32000))
    assert checks["scores_in_unit_interval"] is False and checks["all_questions_scored"] is False


def test_untrained_model_above_chance_warns():
    near_log_vocab = math.log(32000) - 0.1
    checks = score_checks(result(0.40), expected=400, loss=near_log_vocab, vocab_size=32000)
    warning = next(c for c in checks if c.check_name == "chance_while_untrained")
    assert warning.passed is False and warning.severity == dg.AssetCheckSeverity.WARN
    trained = by_name(score_checks(result(0.40), expected=400, loss=2.0, vocab_size=32000))
    assert trained["chance_while_untrained"] is True


def test_the_selection_counts_the_files_and_says_which_subset_ran():
    assert benchmark_selection("data/eval/mmlu.zip", "mmlu", "test", [], None) == (14042, "all 57 subjects, test split")
    assert benchmark_selection("data/eval/mmlu.zip", "mmlu", "test", ["abstract_algebra"], None)[0] == 100
    expected, subset = benchmark_selection("data/eval/mmlu.zip", "mmlu", "test", ["world_religions", "abstract_algebra"], 20)
    assert expected == 40
    assert subset == "2 of 57 subjects (abstract_algebra, world_religions), at most 20 questions each, test split"
    _, subset = benchmark_selection("data/eval/ceval-sample", "ceval", "val", [], None)
    assert "of the shipped C-Eval-format sample (original questions, not C-Eval), val split" in subset



def test_a_random_model_scores_at_chance_on_the_full_mmlu_test_set(tmp_path):
    import torch

    from lm_assets.corpus.decontam.contamination import load_mmlu
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.evaluation import evaluate_mmlu
    from lm_assets.evaluation.checkpoint import EvalModel
    from lm_assets.training.config import from_preset
    from lm_assets.training.model import Transformer

    torch.set_num_threads(1)
    mmlu = load_mmlu("data/eval/mmlu.zip")
    dev = mmlu.filter(mmlu["split"] == "dev")["question"].to_list()
    trained = train_tokenizer(dev, TokenizerConfig(vocab_size=1000, num_threads=1), tmp_path)
    model = Transformer(from_preset("tiny", trained.vocab_size, max_seq_len=64), seed=0).eval()
    result = evaluate_mmlu(EvalModel(model=model, tokenizer=trained.processor()), mmlu, split="test", details=True)
    overall = result["overall"]
    assert overall["n"] == 14042
    expected, low, high = question_blind_chance(result["questions"])
    assert low <= overall["acc"] <= high, (overall["acc"], expected, low, high)
    assert abs(expected - 0.25) < 0.03


def test_evaluation_runs_where_configured_and_auto_means_cuda_bf16_or_cpu_fp32():
    import pytest
    import torch

    from lm_assets.defs.evaluation.common import resolve_device

    expected = ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float32")
    assert resolve_device("auto", "auto") == expected
    assert resolve_device("cpu", "bfloat16") == ("cpu", "bfloat16")
    assert resolve_device("cuda:1", "auto") == ("cuda:1", "bfloat16")
    with pytest.raises(dg.Failure, match="unknown dtype 'fp8'"):
        resolve_device("cpu", "fp8")


def test_category_names_are_the_same_across_benchmarks():
    from lm_assets.defs.evaluation.assets import group_key, per_group_accuracy

    two = {"subjects": 2}  # a category of one subject is not a series of its own
    ceval = {"categories": {name: {"acc": 0.3} | two for name in ("STEM", "Social Science", "Humanities", "Other")},
             "subjects": {"computer_network": {"acc": 0.3}}}  # fmt: skip
    mmlu = {"categories": {name: {"acc": 0.3} | two for name in ("stem", "social_sciences", "humanities", "other")},
            "subjects": {"virology": {"acc": 0.3}}}  # fmt: skip
    names = lambda result: set(per_group_accuracy(result)) - set(result["subjects"])  # noqa: E731
    assert names(ceval) == names(mmlu) == {"stem", "social_sciences", "humanities", "other"}
    assert group_key("Social Science") == group_key("social_sciences")


def exact(acc: float, n: int, n_choices: int = 4) -> dict:
    from lm_assets.evaluation.stats import chance_interval

    low, high = chance_interval(n, n_choices)
    overall = {"n": n, "acc": acc, "acc_norm": acc, "chance_low": low, "chance_high": high}
    return {"overall": overall, "subjects": {"s": {"acc": acc, "acc_norm": acc}}, "truncated": 0, "max_length": 2048}


def chance_check(result: dict, loss: float) -> dg.AssetCheckResult:
    checks = score_checks(result, expected=result["overall"]["n"], loss=loss, vocab_size=32000)
    return next(c for c in checks if c.check_name == "chance_while_untrained")


def test_the_exact_chance_band_lets_the_untrained_check_fail_and_says_when_it_cannot():
    untrained = math.log(32000) - 0.1
    # 100 four-choice questions: the band is 0.13–0.38 (p ± 3 se gave the same), 0.40 is above it.
    failed = chance_check(exact(0.40, 100), untrained)
    assert failed.passed is False and failed.metadata["verdict"].value == "above chance"
    assert failed.metadata["chance_band"].value == "0.1300–0.3800"
    assert chance_check(exact(0.30, 100), untrained).metadata["verdict"].value == "inside the chance band"
    # 8 two-choice questions: p ± 3 se gave -0.0303–1.0303; the exact band is 0–1, and the check says it cannot tell.
    small = chance_check(exact(1.0, 8, n_choices=2), untrained)
    assert small.passed is True and small.metadata["verdict"].value.startswith("cannot tell: on 8 questions")
    assert small.metadata["chance_band"].value == "0.0000–1.0000"
    # 40 two-choice questions: 0.85 is beyond the band even though it is small.
    assert chance_check(exact(0.85, 40, n_choices=2), untrained).passed is False


def test_check_numbers_are_rounded_and_plotted_per_run():
    for checkpoint, run in (("main-step_00000010", "main"), ("sft-step_00000040", "sft")):
        checks = score_checks(exact(0.7092793267718458, 100), expected=100, loss=8.295049140435111, vocab_size=4000,
                              checkpoint=checkpoint)  # fmt: skip
        check = next(c for c in checks if c.check_name == "chance_while_untrained")
        numbers = {k: v.value for k, v in check.metadata.items() if isinstance(v, dg.FloatMetadataValue)}
        assert numbers == {f"{run}/training_loss": 8.295, f"{run}/acc": 0.7093}
        assert check.metadata["log_vocab"].value == "8.2940"
        # Counts and settings are text; the truncated share is keyed by run as the loss is.
        for other in checks:
            assert all(k.startswith(f"{run}/") for k, v in other.metadata.items() if isinstance(v, dg.FloatMetadataValue))
