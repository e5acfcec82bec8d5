"""Safety and bias, one partition per checkpoint: `safety_score` (refusal of harmful requests and over-refusal of
benign look-alikes, English and Chinese; `lm_assets/evaluation/safety.py`), and `crows_pairs_score`, `bbq_score`
and `cbbq_score` as lm-evaluation-harness 0.4.13 scores `crows_pairs_english` and `bbq`
(`lm_assets/evaluation/bias.py`)."""


import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.defs.common.environment import default_of
from lm_assets.defs.common.reporting import markdown_table, run_series
from lm_assets.reporting.tables import readable
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import ToxicityRulesConfig
from lm_assets.defs.evaluation.common import (
    EvaluationDeviceConfig,
    evaluation_asset,
    evaluation_data,
    load_checkpoint_model,
)
from lm_assets.storage.layout import question_results_key, safety_answers_key

SAFETY_SAMPLE = default_of("LM_ASSETS_SAFETY_DIR")
BIAS_SAMPLES = default_of("LM_ASSETS_BIAS_DIR")
SHIPPED = " (the shipped sample: original items, not the release)"


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or value != value else round(value, digits)


class SafetyScoreConfig(EvaluationDeviceConfig):
    path: str | None = Field(default=None, description="harmful and benign prompts, each file in its release's layout "
                             "(AdvBench harmful_behaviors.csv, Do-Not-Answer's CSV, XSTest's xstest_prompts.csv), "
                             f"searched recursively; unset: $LM_ASSETS_SAFETY_DIR, else the shipped sample ({SAFETY_SAMPLE}/)")  # fmt: skip
    max_new_tokens: int = Field(default=48, ge=1, description="tokens of each greedy answer")
    limit: int | None = Field(default=None, ge=1, description="only the first this many prompts; unset: all")
    toxicity: ToxicityRulesConfig = Field(default_factory=ToxicityRulesConfig, description="the thresholds an answer is "
                                          "judged toxic by, as curated_shard's; the toxicity resource is the model")  # fmt: skip


SAFETY_RATES = ("refusal_rate", "over_refusal_rate", "harmful_toxic_share")


def safety_series(summary: dict[str, dict], chat: bool) -> tuple[dict[str, float], set[str]]:
    """The rates recorded (`refusal_rate`, and `refusal_rate_en` per language) and those of them not charted: the
    per-language ones, which by_language tables, and, for a base model, the refusal rates, which mean nothing
    for continuations (all zero, chart after chart). What is charted is what a run is followed by."""
    scores: dict[str, float] = {}
    for language, s in summary.items():
        suffix = "" if language == "all" else f"_{language}"
        scores |= {f"{rate}{suffix}": s[rate] for rate in SAFETY_RATES}
    charted = {"harmful_toxic_share"} | ({"refusal_rate", "over_refusal_rate"} if chat else set())
    return scores, set(scores) - charted


@evaluation_asset(
    description="Refusal of harmful requests (AdvBench-style instructions and Do-Not-Answer-style questions, English and "
    "Chinese) and over-refusal of benign look-alikes (XSTest-style), from greedy answers judged by AdvBench's refusal "
    "phrases (and Chinese ones) and by curation's toxicity filters; every answer kept with its verdict and reason. A base "
    "checkpoint's refusal is not meaningful: its metadata says so and leads with the toxicity of its continuations.",
)
def safety_score(context: dg.AssetExecutionContext, config: SafetyScoreConfig, storage: StorageResource,
                 toxicity: ToxicityResource) -> dg.MaterializeResult:
    from lm_assets.corpus.curation.toxicity import score_toxicity
    from lm_assets.evaluation.safety import REFUSAL_PHRASES_EN, REFUSAL_PHRASES_ZH, read_safety_prompts, score_safety

    store = storage.storage()
    path, shipped = evaluation_data(config.path, "LM_ASSETS_SAFETY_DIR", SAFETY_SAMPLE)
    try:
        prompts = read_safety_prompts(path)[: config.limit]
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise dg.Failure(f"safety_score: {exc}") from exc
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    scored_by = {}

    def toxic_reasons(answers: list[str], languages: list[str]) -> list[str | None]:
        docs = pl.DataFrame({"doc_id": [str(i) for i in range(len(answers))], "text": answers, "lang": languages})
        checked = score_toxicity(docs, toxicity.scorer_config(config.toxicity))
        scored_by["model"] = f"{checked.stats['model']}; Chinese: {checked.stats['zh_lexicon']}"
        reasons = dict(zip(checked.dropped["doc_id"].to_list(), checked.dropped["reason"].to_list()))
        return [reasons.get(str(i)) for i in range(len(answers))]

    result = score_safety(em, prompts, config.max_new_tokens, toxic_reasons)
    rows = pl.DataFrame(result["rows"], schema_overrides={"refusal_phrase": pl.String})
    key = safety_answers_key(context.partition_key)
    store.write_parquet(key, rows)
    summary = result["summary"]
    scores, unplotted = safety_series(summary, result["chat"])
    table = pl.DataFrame([{"language": lang, **{readable(k): (_round(v) if isinstance(v, float) else v) for k, v in s.items()}}
                          for lang, s in summary.items()])  # fmt: skip
    lead = ("refusal_rate" if result["chat"] else "harmful_toxic_share")
    metadata = {
        **run_series(context.partition_key, scores, unplotted),
        "model_kind": dg.MetadataValue.text("chat (answers to the prompt as a user turn)" if result["chat"]
                                            else "base (continuations of the prompt)"),
        "refusal_meaningful": dg.MetadataValue.bool(result["chat"]),
        "headline": dg.MetadataValue.text(f"{lead} = {_round(summary['all'][lead])}"),
        "by_language": markdown_table(table),
        "answers": markdown_table(rows.select("language", "harmful", "verdict", pl.col("prompt").str.slice(0, 60),
                                              pl.col("answer").str.slice(0, 80), "reason").head(12)),
        "prompts": dg.MetadataValue.text(f"{summary['all']['harmful']} harmful, {summary['all']['benign']} benign"),
        "judged_by": dg.MetadataValue.text(f"refusal phrases: AdvBench's {len(REFUSAL_PHRASES_EN)} and "
                                           f"{len(REFUSAL_PHRASES_ZH)} Chinese; toxicity: {scored_by.get('model', 'n/a')}"),
        "decoding": dg.MetadataValue.text(f"greedy, up to {config.max_new_tokens} tokens"),
        "data": dg.MetadataValue.text(path + (SHIPPED if shipped else "")),
        "results": dg.MetadataValue.path(store.uri(key)),
        "seconds": dg.MetadataValue.text(f"{result['seconds']:.2f}"),
        **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
    }
    if result["note"]:
        metadata["note"] = dg.MetadataValue.text(result["note"])
    return dg.MaterializeResult(metadata=metadata)


class BiasScoreConfig(EvaluationDeviceConfig):
    path: str | None = Field(default=None, description="the set as its release ships it (a folder or a file); unset: "
                             f"its folder under $LM_ASSETS_BIAS_DIR, else the shipped sample ({BIAS_SAMPLES}/)")  # fmt: skip
    limit: int | None = Field(default=None, ge=1, description="only the first this many pairs or questions; unset: all")


@evaluation_asset(
    description="CrowS-Pairs (English) as lm-evaluation-harness 0.4.13's `crows_pairs_english` scores it: each pair's two "
    "sentences scored whole; likelihood_diff (mean |Δ log-likelihood|) and pct_stereotype (the share of pairs where the "
    "more stereotyping sentence is more likely; 0.5 is no preference), in total and per bias type; every pair kept.",
)
def crows_pairs_score(context: dg.AssetExecutionContext, config: BiasScoreConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.bias import crows_pairs_questions, crows_pairs_summary, read_crows_pairs
    from lm_assets.evaluation.scoring import score_questions

    store = storage.storage()
    path, shipped = evaluation_data(config.path, "LM_ASSETS_BIAS_DIR", BIAS_SAMPLES, "crows_pairs")
    try:
        rows = read_crows_pairs(path)[: config.limit]
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise dg.Failure(f"crows_pairs_score: {exc} (the release: github.com/nyu-mll/crows-pairs)") from exc
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    scored = score_questions(em, crows_pairs_questions(rows))
    summary = crows_pairs_summary(rows, scored)
    pairs = pl.DataFrame([{**p, "sent_more": r["sent_more"], "sent_less": r["sent_less"],
                           "ll_more": s["loglikelihoods"][0], "ll_less": s["loglikelihoods"][1]}
                          for p, r, s in zip(summary["pairs"], rows, scored)])  # fmt: skip
    key = question_results_key(context.partition_key, "crows_pairs_english")
    store.write_parquet(key, pairs)
    overall = summary["overall"]
    table = pl.DataFrame([{"bias_type": t, "pairs": e["n"], "likelihood_diff": round(e["likelihood_diff"], 4),
                           "pct_stereotype": round(e["pct_stereotype"], 4)} for t, e in summary["by_bias_type"].items()])  # fmt: skip
    return dg.MaterializeResult(metadata={
        **run_series(context.partition_key, {"likelihood_diff": overall["likelihood_diff"], "pct_stereotype": overall["pct_stereotype"],
                                             **{f"pct_stereotype/{t}": e["pct_stereotype"] for t, e in summary["by_bias_type"].items()}}),
        "no_preference": dg.MetadataValue.text("pct_stereotype 0.5"),
        "pairs": dg.MetadataValue.text(str(overall["n"])),
        "by_bias_type": markdown_table(table, max_rows=20),
        "data": dg.MetadataValue.text(path + (SHIPPED if shipped else "")),
        "questions_parquet": dg.MetadataValue.path(store.uri(key)),
        **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
    })


def bbq_asset(name: str, task: str, folder: str, language: str, release: str):
    @evaluation_asset(
        name=name,
        description=f"{'BBQ (English)' if language == 'en' else 'A Chinese BBQ (CBBQ, in BBQ’s layout)'} as "
        "lm-evaluation-harness 0.4.13's `bbq` task scores it: the context, `Q:` question and `A:`, the two people and the "
        "unknown answers as choices; acc, accuracy on ambiguous and disambiguated contexts, and the bias scores (positive: "
        "the stereotype), in total and per category; every question kept." + (" Unknown answers in Chinese." if language == "zh" else ""),
    )
    def _bbq(context: dg.AssetExecutionContext, config: BiasScoreConfig, storage: StorageResource) -> dg.MaterializeResult:
        from lm_assets.evaluation.bias import UNKNOWN_EN, UNKNOWN_ZH, bbq_summary, load_bbq
        from lm_assets.evaluation.scoring import score_questions

        unknowns = UNKNOWN_EN if language == "en" else UNKNOWN_ZH
        store = storage.storage()
        path, shipped = evaluation_data(config.path, "LM_ASSETS_BIAS_DIR", BIAS_SAMPLES, folder)
        try:
            docs, questions = load_bbq(path, task, unknowns)
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise dg.Failure(f"{name}: {exc} (the release: {release})") from exc
        docs, questions = docs[: config.limit], questions[: config.limit]
        em, ran_on = load_checkpoint_model(store, context.partition_key, config)
        scored = score_questions(em, questions)
        summary = bbq_summary(docs, scored, unknowns)
        table = pl.DataFrame([{"category": readable(c), "questions": e["n"],
                               **{readable(k): _round(v) for k, v in e.items() if k != "n"}}
                              for c, e in summary["by_category"].items()])  # fmt: skip
        answers = pl.DataFrame([{**row, "context": d["context"], "question": d["question"], "label": d["label"],
                                 "loglikelihoods": s["loglikelihoods"]}
                                for row, d, s in zip(summary["questions"], docs, scored)])  # fmt: skip
        key = question_results_key(context.partition_key, task)
        store.write_parquet(key, answers)
        overall = summary["overall"]
        # The bias scores per category are in by_category, not one chart (and one long key) each.
        scores = {k: v for k, v in overall.items() if k != "n"}
        return dg.MaterializeResult(metadata={
            **run_series(context.partition_key, scores),
            "questions": dg.MetadataValue.text(str(overall["n"])),
            "no_bias": dg.MetadataValue.text("bias scores 0; they run from -1 (against the stereotype) to 1 (with it)"),
            "by_category": markdown_table(table, max_rows=20),
            "data": dg.MetadataValue.text(path + (SHIPPED if shipped else "")),
            "release": dg.MetadataValue.text(release),
            "questions_parquet": dg.MetadataValue.path(store.uri(key)),
            **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
        })

    return _bbq


bbq_score = bbq_asset("bbq_score", "bbq", "bbq", "en", "github.com/nyu-mll/BBQ (CC BY 4.0)")
cbbq_score = bbq_asset("cbbq_score", "cbbq", "cbbq", "zh", "a Chinese set in BBQ's layout; CBBQ: github.com/YFHuangxxxx/CBBQ (CC BY-SA 4.0)")
SAFETY_ASSETS = [safety_score, crows_pairs_score, bbq_score, cbbq_score]
