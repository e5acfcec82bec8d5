"""Compressed variants of each checkpoint (GGUF F16 and Q8_0, torchao int8), with what each costs."""

from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field, model_validator

from lm_assets.defs.common.environment import DEFAULT_MMLU_PATH, fill_from_environment, unset_means
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import markdown_table
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.evaluation.common import EVAL_DEPS, evaluation_data, hf_export
from lm_assets.defs.evaluation.tasks import SAMPLE_FOLDERS, SAMPLES
from lm_assets.storage.layout import PACKED_FOLDER

KINDS = ("gguf-f16", "gguf-q8_0", "int8")
PROMPTS = ("The river flows past the old mill", "河水流过老磨坊", "def area(r):", "Every morning the baker")


class CompressedCheckpointConfig(dg.Config):
    kinds: list[str] = Field(default=list(KINDS), description="the variants written: gguf-f16, gguf-q8_0, int8")
    max_perplexity_rise_8bit: float = Field(
        default=0.02, description="the largest relative rise of val perplexity an 8-bit variant may cost (0.02: 2%)"
    )
    max_perplexity_rise_16bit: float = Field(
        default=0.005, description="the largest relative rise of val perplexity a 16-bit variant may cost"
    )
    max_sequences: int = Field(default=64, description="val sequences the perplexities are measured on")
    questions_per_task: int = Field(
        default=20, description="questions of each MMLU subject and each suite task compared answer by answer"
    )
    new_tokens: int = Field(default=32, description="tokens generated for each prompt when measuring tokens/s")
    serve_tokens: int = Field(
        default=12, description="tokens of each greedy answer compared between `transformers serve` on the export "
        "(loopback, four requests at once) and our own generation",
    )
    mmlu_path: str | None = Field(
        default=None, description="MMLU's zip or folder; " + unset_means("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(data, {"mmlu_path": ("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)}, paths=("mmlu_path",))


def benchmark_questions(config: CompressedCheckpointConfig) -> dict[str, list]:
    """MMLU's first questions of each subject (zero-shot) and each suite task's, from its data or its shipped sample."""
    from lm_assets.evaluation.prompts import mmlu_questions
    from lm_assets.evaluation.tasks import TASKS, load_task

    questions = {}
    if config.mmlu_path and Path(config.mmlu_path).exists():
        questions["mmlu"] = [q for q in mmlu_questions(config.mmlu_path, "test", 0) if q.index < config.questions_per_task]
    for name, task in TASKS.items():
        path, _ = evaluation_data(None, "LM_ASSETS_EVAL_TASKS_DIR", SAMPLES, SAMPLE_FOLDERS[name])
        questions[name] = load_task(task, path, 0, config.questions_per_task)
    return questions


def perplexity_check(costs: list[dict], config: CompressedCheckpointConfig) -> dg.AssetCheckResult:
    budget = {8: config.max_perplexity_rise_8bit, 16: config.max_perplexity_rise_16bit}
    from lm_assets.compression.variants import BITS

    over = [f"{c['kind']}: {c['perplexity_change']:+.2%} (budget {budget[BITS[c['kind']]]:.1%})"
            for c in costs if c["perplexity_change"] > budget[BITS[c["kind"]]]]  # fmt: skip
    return dg.AssetCheckResult(
        check_name="perplexity_within_budget", passed=not over, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"over_budget": dg.MetadataValue.text("; ".join(over) or "none"),
                  **{c["kind"]: dg.MetadataValue.text(f"{c['perplexity_change']:+.3%}") for c in costs}},
    )  # fmt: skip


def served_check(export: Path, base, config: CompressedCheckpointConfig) -> dg.AssetCheckResult:
    from lm_assets.serving.endpoint import LocalEndpoint, our_answers, served_answers

    chat = base.chat_template is not None
    with LocalEndpoint(export, log=export.parent / "compressed" / "serve.log") as url:
        served = served_answers(url, export, PROMPTS, config.serve_tokens, chat=chat)
    ours = our_answers(base, PROMPTS, config.serve_tokens)
    rows = pl.DataFrame({"prompt": list(PROMPTS), "served": served, "ours": ours, "equal": [a == b for a, b in zip(served, ours)]})
    return dg.AssetCheckResult(
        check_name="served_answers_as_evaluated", passed=served == ours, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"answers": markdown_table(rows), "endpoint": dg.MetadataValue.text(
            f"transformers serve --continuous-batching, {'chat completions' if chat else 'completions'}, "
            f"{len(PROMPTS)} requests at once, greedy, {config.serve_tokens} tokens")},
    )  # fmt: skip


def costs_table(costs: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{
        "variant": c["kind"], "MB": round(c["bytes"] / 2**20, 2), "size vs export": f"{c['size_share']:.0%}",
        "tokens/s": "not measured" if c["tokens_per_s"] is None else f"{c['tokens_per_s']:.0f} (export {c['base_tokens_per_s']:.0f})",
        "perplexity": f"{c['perplexity']:.4g} ({c['perplexity_change']:+.3%})",
        "answers changed": f"{c['changed_share']:.2%}",
        **{f"{name} changed": f"{b['changed']}/{b['questions']}" for name, b in c["benchmarks"].items()},
    } for c in costs])  # fmt: skip


@dg.asset(
    partitions_def=checkpoint_partitions, group_name="compression", kinds={"pytorch", "gguf"}, deps=EVAL_DEPS,
    check_specs=[dg.AssetCheckSpec("perplexity_within_budget", asset="compressed_checkpoint", blocking=True,
                                   description="each variant's val perplexity within its budget of the export's"),
                 dg.AssetCheckSpec("served_answers_as_evaluated", asset="compressed_checkpoint",
                                   description="the export served by `transformers serve` answers four concurrent "
                                   "requests as our own greedy generation does (chat template, tokenizer, weights)")],
    description="The checkpoint's HF export compressed: GGUF in F16 and Q8_0 (llama.cpp's format, chat template in "
    "its metadata) and torchao int8 weight-only, under `<checkpoint>/compressed/`. For each: its size, CPU tokens/s "
    "of greedy generation, val perplexity against the export's, and the share of MMLU and suite answers that "
    "changed, question by question. The check fails when a variant's perplexity rises past its budget.",
)
def compressed_checkpoint(context: dg.AssetExecutionContext, config: CompressedCheckpointConfig,
                          storage: StorageResource) -> dg.MaterializeResult:  # fmt: skip
    from lm_assets.compression.costs import baseline_figures, variant_costs
    from lm_assets.compression.variants import KINDS as KNOWN
    from lm_assets.compression.variants import folder_bytes, load_variant, write_variants
    from lm_assets.evaluation.checkpoint import load_model

    unknown = sorted(set(config.kinds) - set(KNOWN))
    if unknown or not config.kinds:
        raise dg.Failure(f"compressed variants {unknown or '(none)'}: choose from {', '.join(KNOWN)}")
    store = storage.storage()
    export = hf_export(store, context.partition_key)
    variants = write_variants(export, export.parent / "compressed", config.kinds)
    base = load_model(export)
    questions = benchmark_questions(config)
    packed = store.local_path(PACKED_FOLDER)
    settings = {"max_sequences": config.max_sequences, "new_tokens": config.new_tokens}
    baseline = baseline_figures(base, packed, questions, PROMPTS, **settings)
    costs = [variant_costs(base, v, load_variant(v, export), packed, questions, PROMPTS, base_bytes=folder_bytes(export),
                           baseline=baseline, **settings) for v in variants]  # fmt: skip
    for c in costs:
        context.log.info(f"{c['kind']}: {c['bytes']:,} bytes, perplexity {c['perplexity_change']:+.3%}, "
                         f"answers changed {c['changed_share']:.2%}")  # fmt: skip
    checks = [perplexity_check(costs, config), served_check(export, base, config)]
    return dg.MaterializeResult(
        metadata={
            "variants": markdown_table(costs_table(costs)),
            "export_bytes": dg.MetadataValue.int(folder_bytes(export)),
            "export_perplexity": dg.MetadataValue.float(baseline["perplexity"]),
            "questions_compared": dg.MetadataValue.json({name: len(items) for name, items in questions.items()}),
            "files": dg.MetadataValue.json({c["kind"]: c["path"] for c in costs}),
            "notes": dg.MetadataValue.json({c["kind"]: c["note"] for c in costs if c["note"]}),
            "costs": dg.MetadataValue.json(costs),
        },
        check_results=checks,
    )
