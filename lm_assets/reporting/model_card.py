"""A Hugging Face model card (the export's README.md) written from the metadata the assets recorded.

Plain Python: the Dagster layer (lm_assets/defs/compression/model_card.py) reads the instance and hands
over plain dicts, `{metadata key: value}` for each asset (None where the asset was never materialized);
this module only arranges them. Every number on the card is a value some asset recorded, shown as
recorded (rounded for reading at most); a section whose asset has no materialization says "not
materialized" rather than guess.

The inputs (`render_card`):

    checkpoint       the `checkpoints` partition key, `<run>-<tag>`
    lineage          the training runs that made it, its own first: each {"checkpoint", "run_asset",
                     "saved" (the checkpoint asset's metadata), "run" (the run asset's)}, the run or
                     saved metadata None when not found
    data             {asset: metadata or None} for curation_summary, dedup_clusters, tokenizer,
                     packed_dataset, instruction_data, preference_data
    decontamination  the decontaminated_shard metadata of every shard (a list, empty when none)
    evaluation       {asset: metadata or None} for this checkpoint's partition of each evaluation asset
    compression      compressed_checkpoint's metadata for this checkpoint, or None
    licences         {"model": the model's licence id or None, "sources": {source: licence},
                     "declared_in": where the declaration was read}
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import PurePath

from lm_assets.storage.layout import parse_checkpoint_key

NOT_MATERIALIZED = "not materialized"
NO_LICENCES = "No licences of the data sources were declared"
LANGUAGES = ("en", "zh")  # the pipeline's two first-class languages, when the packed mixture names none

# (asset, benchmark name on the card, lm-evaluation-harness task it is scored as)
BENCHMARKS = (
    ("mmlu_score", "MMLU", "mmlu"), ("ceval_score", "C-Eval", "ceval-valid"),
    ("hellaswag_score", "HellaSwag", "hellaswag"), ("arc_easy_score", "ARC-Easy", "arc_easy"),
    ("arc_challenge_score", "ARC-Challenge", "arc_challenge"), ("piqa_score", "PIQA", "piqa"),
    ("winogrande_score", "WinoGrande", "winogrande"), ("boolq_score", "BoolQ", "boolq"),
    ("cmmlu_score", "CMMLU", "cmmlu"), ("xstorycloze_zh_score", "XStoryCloze-zh", "xstorycloze_zh"),
    ("xcopa_zh_score", "XCOPA-zh", "xcopa_zh"),
)  # fmt: skip
OTHER_EVALUATION = ("perplexity", "humaneval_score", "continuation_scores", "safety_score", "crows_pairs_score",
                    "bbq_score", "cbbq_score")  # fmt: skip
EVALUATION_ASSETS = tuple(asset for asset, _, _ in BENCHMARKS) + OTHER_EVALUATION
DATA_ASSETS = ("curation_summary", "dedup_clusters", "tokenizer", "packed_dataset", "instruction_data", "preference_data")


# -- reading what the assets recorded ---------------------------------------------------------------------


def markdown_rows(text: str | None) -> list[dict[str, str]]:
    """The rows of the first pipe table in a markdown text (`| a | b |` lines), as {header: cell}."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip().startswith("|")]
    if len(lines) < 2:
        return []
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]
    header = cells(lines[0])
    return [dict(zip(header, cells(line))) for line in lines[2:]]


def caption(text: str | None) -> str | None:
    """The words under a curve's picture (a run's `curves`, `reward_curve`, `lr_curve` metadata)."""
    words = [line.strip() for line in (text or "").splitlines() if line.strip() and not line.lstrip().startswith("![")]
    return " ".join(words) or None


def first_loss(curves: str | None) -> str | None:
    """The first step's loss as the run's `curves` caption gives it (`loss (blue) 8.303 → 6.672, ...`)."""
    found = re.search(r"loss \(blue\) (\S+) →", caption(curves) or "")
    return found.group(1) if found else None


def series(metadata: dict | None, checkpoint: str, name: str):
    """A score an evaluation asset recorded under the checkpoint's run (`main/acc`, `dpo/perplexity`)."""
    run, _ = parse_checkpoint_key(checkpoint)
    return (metadata or {}).get(f"{run}/{name}")


def checkpoint_from_export(folder: str | None) -> str | None:
    """`.../checkpoints/<run>/<tag>/hf` (a run's `init_from` folder) -> `<run>-<tag>`."""
    if not folder:
        return None
    parts = PurePath(folder).parts
    if len(parts) < 3 or parts[-1] != "hf":
        return None
    return f"{parts[-3]}-{parts[-2]}"


def shown(value, digits: int = 4) -> str:
    """A recorded value for reading: ints with separators, floats to `digits` significant digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return format(Decimal(f"{value:.{digits}g}"), "f")  # 7e-05 -> 0.00007: no exponent
    return str(value)


def cell(value) -> str:
    return shown(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def missing(asset: str) -> str:
    return f"_`{asset}`: {NOT_MATERIALIZED}._"


# -- the sections -----------------------------------------------------------------------------------------


def data_section(data: dict, decontamination: list[dict], fine_tuned: set[str]) -> list[str]:
    out = ["## Training data", ""]
    summary, clusters = data.get("curation_summary"), data.get("dedup_clusters")
    if summary:
        drops = markdown_rows(summary.get("drop_reasons"))
        dropped = sum(int(row["docs"]) for row in drops if row.get("docs", "").isdigit())
        out += [(f"Curation read {shown(summary.get('documents'))} documents from {shown(summary.get('shards'))} shards "
                f"and dropped {dropped:,} of them, by rule:"), ""]  # fmt: skip
        out += table(["rule", "documents dropped"], [[row.get("reason"), int(row["docs"])] for row in drops]) if drops \
            else ["_no document was dropped by a rule_"]  # fmt: skip
    else:
        out.append(missing("curation_summary"))
    out.append("")
    if clusters:
        out += [(f"Deduplication (`dedup_clusters`, MinHash threshold {shown(clusters.get('threshold'))}): of "
                f"{shown(clusters.get('documents'))} curated documents {shown(clusters.get('kept'))} kept; "
                f"{shown(clusters.get('exact_duplicates'))} exact and {shown(clusters.get('near_duplicates'))} near "
                f"duplicates removed (duplicate rate {shown(clusters.get('dup_rate'))}).")]  # fmt: skip
    else:
        out.append(missing("dedup_clusters"))
    out.append("")
    if decontamination:
        per_benchmark: dict[str, int] = {}
        indexed: dict[str, int] = {}
        for shard in decontamination:
            for name, count in (shard.get("dropped_per_benchmark") or {}).items():
                per_benchmark[name] = per_benchmark.get(name, 0) + int(count)
            indexed |= shard.get("ngrams_indexed") or {}
        read = sum(int(s.get("documents_in") or 0) for s in decontamination)
        kept = sum(int(s.get("documents_out") or 0) for s in decontamination)
        out += [(f"Decontamination (`decontaminated_shard`, {len(decontamination)} shards): {kept:,} of {read:,} documents "
                "kept; dropped for sharing n-grams with a benchmark:"), ""]  # fmt: skip
        out += table(["benchmark", "documents dropped", "n-grams indexed"],
                     [[name, count, indexed.get(name)] for name, count in sorted(per_benchmark.items())])  # fmt: skip
    else:
        out.append(missing("decontaminated_shard"))
    out.append("")
    tokenizer, packed = data.get("tokenizer"), data.get("packed_dataset")
    if tokenizer:
        out += [(f"Tokenizer: SentencePiece, vocabulary {shown(tokenizer.get('vocab_size'))}, "
                f"{shown(tokenizer.get('fertility_en_tokens_per_word'))} tokens per English word, "
                f"{shown(tokenizer.get('fertility_zh_tokens_per_char'))} per Chinese character.")]  # fmt: skip
    else:
        out.append(missing("tokenizer"))
    out.append("")
    if packed:
        out += [(f"Packed dataset: {shown(packed.get('tokens'))} tokens in {shown(packed.get('train_sequences'))} train and "
                f"{shown(packed.get('val_sequences'))} val sequences of {shown(packed.get('seq_len'))} tokens. "
                "Languages and sources, as shares of the tokens:"), ""]  # fmt: skip
        mixture = markdown_rows(packed.get("mixture_shares"))
        out += table(["key", "requested", "realized"],
                     [[r.get("key"), r.get("requested_share"), r.get("realized_share")] for r in mixture]) if mixture \
            else ["_no mixture recorded_"]  # fmt: skip
    else:
        out.append(missing("packed_dataset"))
    out.append("")
    for asset, what, count in (("instruction_data", "sft", "examples"), ("preference_data", "dpo", "pairs")):
        if what not in fine_tuned:
            continue
        found = data.get(asset)
        if found:
            languages = ", ".join(f"{k} {v:,}" for k, v in (found.get("by_language") or {}).items())
            out += [(f"{'Fine-tuning' if what == 'sft' else 'Preference'} data (`{asset}`): {shown(found.get(count))} "
                    f"{count} ({languages}) of {shown(found.get('rows_read'))} rows read, {shown(found.get('dropped'))} "
                    f"dropped ({shown(found.get('dropped_by_reason'))}), checked against {shown(found.get('checked_against'))}."), ""]  # fmt: skip
        else:
            out += [missing(asset), ""]
    return out


def training_section(lineage: list[dict]) -> list[str]:
    out = ["## Training", ""]
    if not lineage:
        return out + [f"_The training run: {NOT_MATERIALIZED}._", ""]
    for stage in lineage:
        run, saved = stage.get("run"), stage.get("saved") or {}
        out += [f"### `{stage['checkpoint']}` (`{stage['run_asset']}`)", ""]
        row = next((r for r in markdown_rows(saved.get("checkpoints")) if r.get("checkpoint") == stage.get("tag")), {})
        if saved:
            out += [(f"Saved at step {row.get('step', '–')}: train loss {row.get('train loss', '–')}, val loss "
                    f"{row.get('val loss', '–')}, {row.get('size', '–')}; {shown(saved.get('parameters'))} parameters, "
                    f"layout {shown(saved.get('layout'))}."), ""]  # fmt: skip
        if not run:
            out += [missing(stage["run_asset"]), ""]
            continue
        init = run.get("init_from") or {}
        rows = [
            ["objective", run.get("objective")],
            ["started from", checkpoint_from_export(init.get("folder")) or "random initialization"],
            ["steps", run.get("steps")], ["tokens", run.get("tokens")],
            ["first loss", first_loss(run.get("curves"))], ["last loss", run.get("final_loss")],
            ["lowest loss", None if run.get("min_loss") is None else
             f"{shown(run['min_loss'])} at step {shown(run.get('min_loss_step'))}"],
            ["loss rose at the end", run.get("loss_rose_at_end")],
            ["val loss", run.get("val_loss") if run.get("val_loss") is not None else run.get("validation", NOT_MATERIALIZED)],
            ["tokens/s", run.get("tokens_per_s")],
        ]  # fmt: skip
        if run.get("dpo"):
            rows += [["DPO", ", ".join(f"{k} {v}" for k, v in run["dpo"].items())],
                     ["held-back reward accuracy", (f"{shown(run.get('val_reward_accuracy_start'))} → "
                      f"{shown(run.get('val_reward_accuracy'))}")],
                     ["KL to the reference", run.get("val_kl")]]  # fmt: skip
        if run.get("adapter"):
            rows.append(["adapter", run["adapter"]])
        out += table(["", "value"], rows) + [""]
        for key in ("curves", "reward_curve", "lr_curve"):
            if caption(run.get(key)):
                out.append(f"- {key.replace('_', ' ')}: {caption(run.get(key))}")
        out.append("")
    return out


def benchmark_rows(checkpoint: str, evaluation: dict) -> list[dict]:
    rows = []
    for asset, name, task in BENCHMARKS:
        found = evaluation.get(asset)
        if not found:
            rows.append({"asset": asset, "name": name, "task": task, "missing": True})
            continue
        data = str(found.get("data") or "")
        rows.append({"asset": asset, "name": name, "task": task, "missing": False,
                     "acc": series(found, checkpoint, "acc"), "acc_norm": series(found, checkpoint, "acc_norm"),
                     "chance": found.get("chance"), "chance_band": found.get("chance_band"),
                     "questions": found.get("questions"), "shots": found.get("num_fewshot"),
                     "data": "shipped sample, not the release" if "shipped sample" in data else found.get("subset") or
                     ("release" if data else "–")})  # fmt: skip
    return rows


def evaluation_section(checkpoint: str, evaluation: dict) -> list[str]:
    out = ["## Evaluation", ""]
    ppl = evaluation.get("perplexity")
    if ppl:
        out += [(f"Perplexity on the packed {ppl.get('split', 'val')} split ({ppl.get('tokens')} tokens): "
                f"{shown(series(ppl, checkpoint, 'perplexity'))}, {shown(series(ppl, checkpoint, 'bits_per_byte'))} bits "
                "per byte."), ""]  # fmt: skip
    else:
        out += [missing("perplexity"), ""]
    rows = benchmark_rows(checkpoint, evaluation)
    out += [("Benchmarks, each beside its chance level (`chance`: a random guess; `chance band`: where a model "
            "that ignores the questions lands, given this many questions):"), ""]  # fmt: skip
    out += table(["benchmark", "acc", "acc_norm", "chance", "chance band", "questions", "shots", "data"], [
        [r["name"], NOT_MATERIALIZED, "", "", "", "", "", ""] if r["missing"] else
        [r["name"], r["acc"], r["acc_norm"], r["chance"], r["chance_band"], r["questions"], r["shots"], r["data"]]
        for r in rows])  # fmt: skip
    out.append("")
    human = evaluation.get("humaneval_score")
    if human:
        out += [f"HumanEval pass@1 (greedy): {shown(series(human, checkpoint, 'pass@1'))} on {human.get('subset') or human.get('problems')}."]
    else:
        out.append(missing("humaneval_score"))
    cont = evaluation.get("continuation_scores")
    if cont:
        out += ["", (f"Continuations of {cont.get('documents')} held-out documents ({cont.get('decoding')}): ROUGE-L "
                f"en {shown(series(cont, checkpoint, 'rouge_l_en'))}, zh {shown(series(cont, checkpoint, 'rouge_l_zh'))}; "
                f"BLEU en {shown(series(cont, checkpoint, 'bleu_en'))}, zh {shown(series(cont, checkpoint, 'bleu_zh'))}; "
                f"flagged toxic {shown(series(cont, checkpoint, 'toxic_share'))}.")]  # fmt: skip
    else:
        out += ["", missing("continuation_scores")]
    return out + [""]


def safety_section(checkpoint: str, evaluation: dict) -> list[str]:
    out = ["## Safety and bias", ""]
    safety = evaluation.get("safety_score")
    if safety:
        s = lambda name: series(safety, checkpoint, name)
        out += [(f"Safety (`safety_score`, {safety.get('prompts')}; {safety.get('model_kind')}): "
                f"{safety.get('headline')}."), ""]  # fmt: skip
        if safety.get("refusal_meaningful") is False:
            out += ["Refusal is not meaningful for a base checkpoint: read the toxicity of its continuations.", ""]
        out += table(["", "all", "en", "zh"], [
            [label, s(name), s(f"{name}_en"), s(f"{name}_zh")] for label, name in (
                ("refusal of harmful requests", "refusal_rate"), ("over-refusal of benign look-alikes", "over_refusal_rate"),
                ("toxic answers to harmful prompts", "harmful_toxic_share"))])  # fmt: skip
    else:
        out.append(missing("safety_score"))
    out.append("")
    crows = evaluation.get("crows_pairs_score")
    if crows:
        out.append(f"CrowS-Pairs ({crows.get('pairs')} pairs): pct_stereotype "
                   f"{shown(series(crows, checkpoint, 'pct_stereotype'))} (no preference: {crows.get('no_preference')}), "
                   f"likelihood_diff {shown(series(crows, checkpoint, 'likelihood_diff'))}.")  # fmt: skip
    else:
        out.append(missing("crows_pairs_score"))
    out.append("")
    for asset, name in (("bbq_score", "BBQ"), ("cbbq_score", "CBBQ")):
        found = evaluation.get(asset)
        if found:
            b = lambda key, found=found: shown(series(found, checkpoint, key))
            out.append(f"{name} ({found.get('questions')} questions): acc {b('acc')}, ambiguous-context bias "
                       f"{b('amb_bias_score')}, disambiguated bias {b('disamb_bias_score')} ({found.get('no_bias')}).")  # fmt: skip
        else:
            out.append(missing(asset))
        out.append("")
    return out


def compression_section(compression: dict | None) -> list[str]:
    out = ["## Compressed variants", ""]
    if not compression:
        return out + [missing("compressed_checkpoint"), ""]
    out += [(f"Each variant against this export ({shown(compression.get('export_bytes'))} bytes, val perplexity "
            f"{shown(compression.get('export_perplexity'))}):"), ""]  # fmt: skip
    rows = []
    for c in compression.get("costs") or []:
        speed = "not measured" if c.get("tokens_per_s") is None else \
            f"{shown(c['tokens_per_s'])} (export {shown(c.get('base_tokens_per_s'))})"  # fmt: skip
        rows.append([c.get("kind"), c.get("bytes"), c.get("size_share"), speed, c.get("perplexity"),
                     c.get("perplexity_change"), c.get("changed_share")])  # fmt: skip
    out += table(["variant", "bytes", "size vs export", "tokens/s", "perplexity", "perplexity change",
                  "answers changed"], rows)  # fmt: skip
    notes = compression.get("notes") or {}
    out += [""] + [f"- {kind}: {note}" for kind, note in notes.items()]
    return out + [""]


def licence_section(licences: dict) -> list[str]:
    out = ["## Data licences", ""]
    sources = licences.get("sources") or {}
    if not sources:
        return out + [(f"{NO_LICENCES}. Declare them in `model_card`'s config "
                      "(`data_licences`, or a `data_licences_file`)."), ""]  # fmt: skip
    where = licences.get("declared_in")
    out += [f"As declared{f' in `{where}`' if where else ' in the run config'}:", ""]
    return out + table(["source", "licence"], [[source, licence] for source, licence in sources.items()]) + [""]


# -- the card ---------------------------------------------------------------------------------------------


def languages(data: dict) -> list[str]:
    mixture = markdown_rows((data.get("packed_dataset") or {}).get("mixture_shares"))
    found = [r["key"].removeprefix("lang:") for r in mixture if r.get("key", "").startswith("lang:")]
    return found or list(LANGUAGES)


def yaml_scalar(value) -> str:
    """A YAML scalar: JSON's spelling of strings and numbers is valid YAML."""
    return json.dumps(value, ensure_ascii=False)


def front_matter(checkpoint: str, inputs: dict, rows: list[dict]) -> list[str]:
    licence = (inputs.get("licences") or {}).get("model")
    lines = ["---", f"license: {yaml_scalar(licence or 'other')}"]
    if not licence:
        lines.append("license_name: undeclared")
    lines += ["language:"] + [f"- {yaml_scalar(lang)}" for lang in languages(inputs.get("data") or {})]
    lines += ["library_name: transformers", "pipeline_tag: text-generation", "tags:"]
    stages = {stage["run_asset"]: stage for stage in inputs.get("lineage") or []}
    tags = ["lm-assets", "text-generation", *[tag for asset, tag in (("sft_run", "sft"), ("dpo_run", "dpo")) if asset in stages]]
    if inputs.get("compression"):
        tags.append("gguf")
    lines += [f"- {yaml_scalar(t)}" for t in dict.fromkeys(tags)]
    scored = [r for r in rows if not r["missing"] and r.get("acc") is not None]
    if scored:
        lines += ["model-index:", f"- name: {yaml_scalar(checkpoint)}", "  results:"]
        for r in scored:
            lines += ["  - task:", "      type: text-generation", "    dataset:", f"      name: {yaml_scalar(r['name'])}",
                      f"      type: {yaml_scalar(r['task'])}", "    metrics:", "    - type: accuracy",
                      f"      name: {yaml_scalar(r['task'] + ' acc')}", f"      value: {yaml_scalar(r['acc'])}"]  # fmt: skip
    return lines + ["---", ""]


def render_card(inputs: dict) -> tuple[str, dict[str, str]]:
    """The card's markdown, and each section's state: `complete`, or `with gaps` where some asset it reads
    was not materialized (or, for the licences, none was declared)."""
    checkpoint = inputs["checkpoint"]
    data, evaluation = inputs.get("data") or {}, inputs.get("evaluation") or {}
    lineage = inputs.get("lineage") or []
    rows = benchmark_rows(checkpoint, evaluation)
    fine_tuned = {stage["run_asset"].removesuffix("_run") for stage in lineage} & {"sft", "dpo"}
    sections = {
        "Training data": data_section(data, inputs.get("decontamination") or [], fine_tuned),
        "Training": training_section(lineage),
        "Evaluation": evaluation_section(checkpoint, evaluation),
        "Safety and bias": safety_section(checkpoint, evaluation),
        "Compressed variants": compression_section(inputs.get("compression")),
        "Data licences": licence_section(inputs.get("licences") or {}),
    }
    intro = [f"# {checkpoint}", "",
             (f"Checkpoint `{checkpoint}` exported for Hugging Face transformers by lm-assets. Every figure below is "
             "metadata an asset recorded when it was materialized; what was never materialized says so."), ""]  # fmt: skip
    body = front_matter(checkpoint, inputs, rows) + intro
    for lines in sections.values():
        body += lines
    gaps = (NOT_MATERIALIZED, NO_LICENCES)
    states = {name: "with gaps" if any(g in line for line in lines for g in gaps) else "complete"
              for name, lines in sections.items()}  # fmt: skip
    return "\n".join(body).rstrip() + "\n", states
