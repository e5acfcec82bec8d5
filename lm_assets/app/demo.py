"""`make demo`: materialize the whole asset graph on the shipped sample crawl and say what was made.

Runs against the instance in $DAGSTER_HOME (SQLite), each run launched by its run launcher on the code
location workspace.yaml declares, so everything shows up in `make ui` afterwards: the assets, and the
runs on their jobs' pages and the timeline.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import dagster as dg
import polars as pl

from lm_assets.app.local_run import DEMO_RUN_CONFIG, LaunchedRuns, run_shard_graph, shard_files
from lm_assets.defs.common.environment import project_path
from lm_assets.defs.common.reporting import latest_metadata, series_value
from lm_assets.defs.common.resources import default_resources
from lm_assets.defs.common.sample_defaults import VARIABLE as PROFILE_VARIABLE
from lm_assets.defs.evaluation.tasks import SCORE_ASSETS
from lm_assets.evaluation.samples import SAMPLE_PROMPTS
from lm_assets.storage.accounting import reason_counts
from lm_assets.storage.layout import (
    CLUSTERS_KEY,
    DOCUMENT_STAGES,
    LABELS_FOLDER,
    PACKED_FOLDER,
    PACKED_MANIFEST,
    quarantine_key,
    raw_keys,
    samples_key,
    stage_keys,
    tokenized_keys,
)

# Hand labels of the sample crawl's pages (data/quality-labels/README.md), put where a team would put
# theirs: under labels/ in the storage root.
DEMO_LABELS = "data/quality-labels/sample-crawl.jsonl"
DEMO_LABELS_KEY = f"{LABELS_FOLDER}/sample-crawl.jsonl"


def quarantine_keys(store, shard: str) -> list[str]:
    """The quarantine tables of a shard's stages (the reader's, and extraction's timeouts)."""
    return [key for key in (quarantine_key(stage, shard) for stage in DOCUMENT_STAGES) if store.exists(key)]


def shard_summary(store, shard: str) -> dict:
    def height(key):
        return store.read_parquet(key, columns=["doc_id"]).height

    return {
        "shard": shard,
        "raw_docs": height(raw_keys(shard)["documents"]),
        "quarantined": sum(height(key) for key in quarantine_keys(store, shard)),
        **{stage: height(stage_keys(stage, shard)["documents"]) for stage in DOCUMENT_STAGES[1:]},
        "tokens": json.loads(store.read_bytes(tokenized_keys(shard)["sidecar"]))["token_count"],
    }


def reasons_by_stage(counts: pl.DataFrame) -> pl.DataFrame:
    """One row per stage: its documents, and its reasons by count, most first."""
    return (
        counts.sort("docs", descending=True)
        .group_by("stage", maintain_order=True)
        .agg(pl.col("docs").sum(), pl.format("{} {}", "reason", "docs").str.join(", ").alias("reasons"))
        .sort("docs", descending=True)
    )


@contextmanager
def output_to(log: Path):
    """Everything written to stdout and stderr, by this process and the training processes it starts,
    goes to `log`; the context's value is a file on the terminal."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(1), "w")
    try:
        with open(log, "w", buffering=1) as sink, redirect_stdout(sink), redirect_stderr(sink):
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield terminal
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        terminal.close()


# The training program's progress lines (lm_assets/training/monitor.py), as rank 0 writes them to the log.
PROGRESS_LINE = re.compile(r"^\[rank 0\] (step \d+/\d+ .*)$")


@contextmanager
def echoed_progress(log: Path, terminal):
    """While the context is open, each training progress line written to `log` is also shown on `terminal`."""
    done = threading.Event()

    def follow():
        with open(log, errors="replace") as lines:
            pending = ""
            while True:
                finished = done.is_set()  # read before the check, so nothing written before `done` is missed
                pending += lines.readline()
                if pending.endswith("\n"):
                    match = PROGRESS_LINE.match(pending.rstrip("\n"))
                    if match:
                        print(f"{'':17}training {match.group(1)}", file=terminal, flush=True)
                    pending = ""
                elif finished:
                    return
                else:
                    time.sleep(0.2)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        yield
    finally:
        done.set()
        follower.join()


def step_line(what: str, result: dg.ExecuteInProcessResult, seconds: float) -> str:
    """One line per run: what ran, how long, and the documents its assets took in and gave out."""
    metadata = [event.materialization.metadata for event in result.get_asset_materialization_events()]
    counts = [
        ((m.get("documents_in") or m["records_in"]).value, m["documents_out"].value)
        for m in metadata
        if ("documents_in" in m or "records_in" in m) and "documents_out" in m
    ]
    status = "ok" if result.success else "FAILED"
    documents = f"{counts[0][0]:>5} → {counts[-1][1]:>5} documents" if counts else ""
    return f"  {status:6} {seconds:6.1f} s  {what:<70} {documents}".rstrip()


def main() -> int:
    # The sample crawl's profile (lm_assets/defs/common/sample_defaults.py), as `make ui` selects it: the code
    # server and the runs it launches inherit it, so that what the run config leaves unset takes the profile's.
    os.environ[PROFILE_VARIABLE] = "sample"
    from lm_assets.definitions import defs

    instance = dg.DagsterInstance.get()
    resources = default_resources()
    landing, store = resources["landing"].storage(), resources["storage"].storage()
    shards = shard_files(landing)
    if not shards:
        print(f"no shard files found in {landing.root}", file=sys.stderr)
        return 1
    put_labels(store)
    log = Path(os.environ.get("DAGSTER_HOME") or store.root) / "demo.log"
    elapsed = materialize_graph(defs, instance, shards, log)
    if elapsed is None:
        return 1
    print_documents(store, shards, elapsed)
    print_classifier(instance)
    print_packed(store)
    ckpt_meta = print_training(instance)
    pretrained = print_scores(instance, ckpt_meta)
    print_safety_and_bias(instance, pretrained)
    tuned = print_fine_tuning(instance, store, pretrained)
    aligned = print_alignment(instance, tuned)
    print_aligned_beside_tuned(instance, tuned, aligned)
    print_distilled(instance)
    print_compressed(instance, aligned)
    print_model_card(instance, aligned)
    print_outputs(store)
    return 0


def put_labels(store) -> None:
    """The sample crawl's hand labels, put under labels/ in the storage root, where the classifier reads them."""
    with open(project_path(DEMO_LABELS), "rb") as labels:
        store.write_bytes(DEMO_LABELS_KEY, labels.read())
    print(f"quality labels: {DEMO_LABELS} -> {store.uri(DEMO_LABELS_KEY)}")


def materialize_graph(defs: dg.Definitions, instance: dg.DagsterInstance, shards: list[str], log: Path) -> float | None:
    """Every shard through the whole graph, a line per run on the terminal and the rest in `log`: the seconds
    it took, or None when a run failed (said on stderr)."""
    print(f"Materializing the graph for {len(shards)} shards; Dagster's and DeepSpeed's logs go to {log}")
    started = time.perf_counter()
    with output_to(log) as terminal, echoed_progress(log, terminal), LaunchedRuns(instance) as runs:
        results = run_shard_graph(
            defs, instance, shards, DEMO_RUN_CONFIG, through_packing=True, through_training=True, train_classifier=True,
            finished=lambda what, result, seconds: print(step_line(what, result, seconds), file=terminal, flush=True),
            execute=runs.execute,
        )
    if not results[-1].success:
        print(f"run {results[-1].run_id} failed: see {log} and `make ui`", file=sys.stderr)
        return None
    return time.perf_counter() - started


def print_documents(store, shards: list[str], elapsed: float) -> None:
    """Documents per shard and stage, and why documents were dropped or quarantined."""
    summary = pl.DataFrame([shard_summary(store, s) for s in shards])
    tables = []
    for shard in shards:
        for key in (raw_keys(shard)["dropped"], *quarantine_keys(store, shard),
                    *(stage_keys(stage, shard)["dropped"] for stage in DOCUMENT_STAGES[1:])):
            tables.append(store.read_parquet(key))
    with pl.Config(tbl_rows=60, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True, tbl_width_chars=120,
                   fmt_str_lengths=90):
        print("\nDocuments per shard and stage:")
        print(summary)
        print("\nWhy documents were dropped or quarantined (all shards; curation_summary in the UI shows more):")
        print(reasons_by_stage(reason_counts(*tables)))
    print(f"\nMaterialized the whole graph for {len(shards)} shard partitions in {elapsed:.0f} s.")


def print_classifier(instance: dg.DagsterInstance) -> None:
    """The quality classifier's training data, held-back scores and thresholds, and the curation policy."""
    classifier = instance.get_latest_materialization_event(dg.AssetKey("quality_classifier")).asset_materialization.metadata
    curated = instance.get_latest_materialization_event(dg.AssetKey("curated_shard")).asset_materialization.metadata
    trained_on = classifier["trained_on"].value
    thresholds = ", ".join(f"{lang} {cut:.3f}" for lang, cut in classifier["thresholds"].value.items() if lang != "*")
    print(
        f"\nQuality classifier {classifier['classifier_hash'].value}: trained on the sample crawl's "
        f"{trained_on['your labelled pages']} labelled pages and the {trained_on['shipped labelled pages']} the package "
        f"ships; on {classifier['n_test'].value} held back, balanced accuracy {classifier['balanced_accuracy'].value:.3f}, "
        f"ROC AUC {classifier['roc_auc'].value:.3f}, thresholds {thresholds}; cross-validated with each labelled "
        f"source left out, {classifier['source_out_balanced_accuracy'].value:.3f} (by site "
        f"{classifier['by_site_balanced_accuracy'].value:.3f}). "
        f"Curation policy: {curated['quality_policy'].value}."
    )


def print_packed(store) -> None:
    """The packed dataset's sequences, tokenizer and packing efficiency."""
    manifest = json.loads(store.read_bytes(PACKED_MANIFEST))
    splits = manifest["splits"]
    print(
        f"\nPacked dataset: {splits['train']['sequences']} train + {splits['val']['sequences']} val sequences of "
        f"{manifest['seq_len']} tokens ({manifest['dtype']}), tokenizer {manifest['tokenizer_hash'][:12]}, "
        f"packing efficiency {manifest['efficiency']:.3f}"
    )


def print_training(instance: dg.DagsterInstance) -> dict:
    """The training run's layout, steps, losses and speed, and where its curves and export are; the checkpoint's
    metadata."""
    run_meta = instance.get_latest_materialization_event(dg.AssetKey("training_run")).asset_materialization.metadata
    ckpt_meta = instance.get_latest_materialization_event(dg.AssetKey("checkpoint")).asset_materialization.metadata
    tokens_per_s = run_meta["tokens_per_s"].value
    resumed = run_meta["resumed_from_step"].value
    final_loss = run_meta["final_loss"].value
    loss_text = f"final loss {final_loss:.3f}, " if final_loss is not None else ""
    if "min_loss" in run_meta:
        loss_text = f"final loss {final_loss:.3f} (lowest {run_meta['min_loss'].value:.3f} at step {run_meta['min_loss_step'].value}), "
    speed = (f"{tokens_per_s:,.0f} tokens/s after warm-up" if tokens_per_s is not None
             else f"no step left to run: resumed from the checkpoint of step {resumed}")  # fmt: skip
    print(
        f"Training: tiny model, {ckpt_meta['layout'].value} on CPU, {run_meta['steps'].value} steps, "
        f"{loss_text}{speed}; checkpoints {', '.join(ckpt_meta['tags'].value)}"
    )
    if "curves_png" in run_meta:
        print(f"Curves:           {run_meta['curves_png'].value}; "
              f".venv/bin/tensorboard --logdir {run_meta['tensorboard_logdir'].value}")
    print(f"HF export:        {ckpt_meta['hf_export'].value}  (transformers.LlamaForCausalLM.from_pretrained)")
    return ckpt_meta


def print_scores(instance: dg.DagsterInstance, ckpt_meta: dict) -> str:
    """Validation loss and perplexity by checkpoint, and the last pretraining checkpoint's benchmark and task
    scores; that checkpoint."""
    pretraining = [k for k in instance.get_dynamic_partitions("checkpoints") if k.startswith("main-")]
    pretrained = pretraining[-1]
    trend = []
    for key in pretraining:
        perplexity = series_value(latest_metadata(instance, dg.AssetKey("perplexity"), key), key, "perplexity")
        if perplexity is not None:
            trend.append(f"{key.rsplit('_', 1)[-1].lstrip('0')} {perplexity:,.0f}")
    from lm_assets.training.checkpoint import describe_checkpoints  # torch: imported once the graph has run

    checkpoints = describe_checkpoints(ckpt_meta["checkpoint_dir"].value, ckpt_meta["tags"].value)
    vals = [f"{c['val_loss']:.4f}" for c in checkpoints if c["val_loss"] is not None]
    if vals:
        print(f"By checkpoint:    validation loss {' → '.join(vals)}; perplexity at step {', '.join(trend)}")
    scores = {k: latest_metadata(instance, dg.AssetKey(k), pretrained)
              for k in ("perplexity", "mmlu_score", "ceval_score", "humaneval_score")}

    def score(asset: str, name: str) -> float:
        return series_value(scores[asset], pretrained, name)

    print(
        f"Scores of {pretrained}: perplexity {score('perplexity', 'perplexity'):,.1f} "
        f"({score('perplexity', 'bits_per_byte'):.3f} bits/byte); "
        f"MMLU acc {score('mmlu_score', 'acc'):.3f} on {scores['mmlu_score']['questions'].value} questions "
        f"(chance band {scores['mmlu_score']['chance_band'].value}); "
        f"C-Eval sample acc {score('ceval_score', 'acc'):.3f} on {scores['ceval_score']['questions'].value}; "
        f"HumanEval pass@1 {score('humaneval_score', 'pass@1'):.3f} on {scores['humaneval_score']['subset'].value}, "
        "run in the sandbox"
    )
    suite = latest_metadata(instance, dg.AssetKey("benchmark_suite"), pretrained)
    if suite is not None:
        tasks = [name.removesuffix("_score") for name in SCORE_ASSETS]
        shown = [f"{t} {series_value(suite, pretrained, f'{t}/acc'):.2f}" for t in tasks
                 if series_value(suite, pretrained, f"{t}/acc") is not None]  # fmt: skip
        print(f"Task suite:       {', '.join(shown)} (acc, zero-shot, on the shipped samples; chance beside each in "
              "benchmark_suite)")
    return pretrained


def print_fine_tuning(instance: dg.DagsterInstance, store, pretrained: str) -> str:
    """The instruction data, the fine-tuning run and what the tuned checkpoint answers; that checkpoint."""
    instructions = instance.get_latest_materialization_event(dg.AssetKey("instruction_data")).asset_materialization.metadata
    sft = instance.get_latest_materialization_event(dg.AssetKey("sft_run")).asset_materialization.metadata
    sft_checkpoint = instance.get_latest_materialization_event(dg.AssetKey("sft_checkpoint")).asset_materialization.metadata
    tuned = next(k for k in reversed(instance.get_dynamic_partitions("checkpoints")) if k.startswith("sft-"))
    sample = store.read_parquet(samples_key(tuned))["greedy"][0]
    sft_loss, sft_resumed = sft["final_loss"].value, sft["resumed_from_step"].value
    answer_loss = (f"loss on the answers {sft_loss:.3f}" if sft_loss is not None
                   else f"no step left to run: resumed from the checkpoint of step {sft_resumed}")  # fmt: skip
    print(
        f"Fine-tuning:      {instructions['examples'].value} instruction examples (shipped, English and Chinese), "
        f"{sft['steps'].value} steps from {pretrained}, {answer_loss}; {tuned} exported "
        f"with its chat template: {sft_checkpoint['hf_export'].value}; asked \"{SAMPLE_PROMPTS[0]}\" it answers "
        f"{sample.strip()[:60]!r}"
    )
    return tuned


def print_alignment(instance: dg.DagsterInstance, tuned: str) -> str:
    """The preference pairs and the DPO run against the held-back pairs; the aligned checkpoint."""
    preferences = instance.get_latest_materialization_event(dg.AssetKey("preference_data")).asset_materialization.metadata
    print(f"Preferences:      {preferences['pairs'].value} preference pairs (shipped, English and Chinese), "
          f"{preferences['dropped'].value} quarantined")
    dpo = instance.get_latest_materialization_event(dg.AssetKey("dpo_run")).asset_materialization.metadata
    dpo_checkpoint = instance.get_latest_materialization_event(dg.AssetKey("dpo_checkpoint")).asset_materialization.metadata
    aligned = next(k for k in reversed(instance.get_dynamic_partitions("checkpoints")) if k.startswith("dpo-"))
    if "val_reward_accuracy" in dpo:
        held_back = (f"on held-back pairs reward accuracy {dpo['val_reward_accuracy_start'].value:.2f} → "
                     f"{dpo['val_reward_accuracy'].value:.2f}, margin {dpo['val_reward_margin_start'].value:.3f} → "
                     f"{dpo['val_reward_margin'].value:.3f}, KL to the reference {dpo['val_kl'].value:.4f}")  # fmt: skip
    else:
        held_back = f"no held-back pairs measured ({dpo['validation'].value})"
    print(f"Alignment (DPO):  {dpo['steps'].value} steps from {tuned}, {held_back}; {aligned} exported: "
          f"{dpo_checkpoint['hf_export'].value}")
    return aligned


def print_outputs(store) -> None:
    """Where the outputs are, and what to run next."""
    print(f"\nOutputs:          {store.root}/{{raw,extracted,curated,minhash,deduplicated,decontaminated,tokenized}}/<shard>/")
    print(f"                  {store.uri(CLUSTERS_KEY)}, {store.uri('tokenizer')}/, {store.uri(PACKED_FOLDER)}/")
    print("Trace a sequence: .venv/bin/lm-assets lineage --split train --index 0")
    print(f"Dagster instance: {os.environ.get('DAGSTER_HOME', '(ephemeral)')}")
    print("Open the UI:      make ui   then browse http://127.0.0.1:3000 (asset graph, checks, metadata)")


def print_aligned_beside_tuned(instance: dg.DagsterInstance, tuned: str, aligned: str) -> None:
    """The DPO checkpoint's scores beside the fine-tuned one's it started from."""

    def value(asset: str, checkpoint: str, name: str) -> str:
        number = series_value(latest_metadata(instance, dg.AssetKey(asset), checkpoint), checkpoint, name)
        return "—" if number is None else f"{number:,.3f}"

    measures = [("perplexity", "perplexity", "perplexity"), ("mmlu_score", "acc", "MMLU acc"),
                ("humaneval_score", "pass@1", "HumanEval pass@1"), ("safety_score", "refusal_rate", "refusal"),
                ("hellaswag_score", "acc", "HellaSwag acc"), ("cmmlu_score", "acc", "CMMLU acc")]  # fmt: skip
    shown = [f"{label} {value(asset, tuned, name)} → {value(asset, aligned, name)}" for asset, name, label in measures]
    print(f"Evaluated again:  {tuned} → {aligned}: {'; '.join(shown)}")


def print_distilled(instance: dg.DagsterInstance) -> None:
    """The distilled student beside its teacher: layers, the KL it reached, and each one's perplexity."""
    event = instance.get_latest_materialization_event(dg.AssetKey("distill_run"))
    if event is None:
        return
    run = event.asset_materialization.metadata
    teacher_folder = Path(run["teacher"].value)
    teacher = f"{teacher_folder.parents[1].name}-{teacher_folder.parent.name}"
    student = next(k for k in reversed(instance.get_dynamic_partitions("checkpoints")) if k.startswith("distill-"))
    export = Path(instance.get_latest_materialization_event(dg.AssetKey("distill_checkpoint")).asset_materialization
                  .metadata["hf_export"].value)  # fmt: skip
    layers = [json.loads((folder / "config.json").read_text())["num_hidden_layers"] for folder in (export, teacher_folder)]

    def perplexity(checkpoint: str) -> str:
        number = series_value(latest_metadata(instance, dg.AssetKey("perplexity"), checkpoint), checkpoint, "perplexity")
        return "—" if number is None else f"{number:,.1f}"

    print(f"Distilled:        {teacher} → {student} ({layers[0]} of {layers[1]} layers), {run['steps'].value} steps, "
          f"KL to the teacher {run['distill_kl'].value:.3f} a token; perplexity {perplexity(teacher)} → "
          f"{perplexity(student)}")


def print_compressed(instance: dg.DagsterInstance, checkpoint: str) -> None:
    """What each compressed variant of `checkpoint` cost."""
    meta = latest_metadata(instance, dg.AssetKey("compressed_checkpoint"), checkpoint)
    if meta is None:
        return
    parts = []
    for c in meta["costs"].value:
        speed = "" if c["tokens_per_s"] is None else f", {c['tokens_per_s']:.0f} tokens/s (export {c['base_tokens_per_s']:.0f})"
        parts.append(f"{c['kind']} {c['bytes'] / 2**20:.2f} MB ({c['size_share']:.0%}), perplexity "
                     f"{c['perplexity_change']:+.2%}, answers changed {c['changed_share']:.1%}{speed}")  # fmt: skip
    print(f"Compressed:       {checkpoint}: {'; '.join(parts)}; files under {Path(meta['files'].value['gguf-f16']).parent}")


def print_model_card(instance: dg.DagsterInstance, checkpoint: str) -> None:
    """Where `checkpoint`'s model card was written, and which of its sections lack an asset's figures."""
    meta = latest_metadata(instance, dg.AssetKey("model_card"), checkpoint)
    if meta is None:
        return
    gaps = [name for name, state in meta["sections"].value.items() if state != "complete"]
    print(f"Model card:       {meta['path'].value} (sections with gaps: {', '.join(gaps) or 'none'})")


def print_safety_and_bias(instance: dg.DagsterInstance, pretrained: str) -> None:
    """Refusal on the latest fine-tuned checkpoint (a chat model), toxicity on the base one, and the bias scores."""

    def shown(asset: str, checkpoint: str, name: str) -> str:
        value = series_value(latest_metadata(instance, dg.AssetKey(asset), checkpoint), checkpoint, name)
        return "n/a" if value is None else f"{value:.2f}"

    tuned = [k for k in instance.get_dynamic_partitions("checkpoints") if k.startswith("sft-")
             and latest_metadata(instance, dg.AssetKey("safety_score"), k) is not None]  # fmt: skip
    parts = []
    if tuned:
        rate = lambda name: shown("safety_score", tuned[-1], name)  # noqa: E731
        parts.append(f"{tuned[-1]} (chat) refuses {rate('refusal_rate')} of harmful prompts (en {rate('refusal_rate_en')}, "
                     f"zh {rate('refusal_rate_zh')}) and {rate('over_refusal_rate')} of benign look-alikes")
    base = latest_metadata(instance, dg.AssetKey("safety_score"), pretrained)
    if base is not None:
        parts.append(f"{pretrained} (base): refusal not meaningful, toxic share of its continuations "
                     f"{shown('safety_score', pretrained, 'harmful_toxic_share')}")
    if parts:
        print(f"Safety:           {'; '.join(parts)} ({base['prompts'].value if base else ''} prompts, shipped sample)")
    bias = ("crows_pairs_score", "bbq_score", "cbbq_score")
    if all(latest_metadata(instance, dg.AssetKey(a), pretrained) is not None for a in bias):
        print(f"Bias of {pretrained}: CrowS-Pairs pct_stereotype {shown(bias[0], pretrained, 'pct_stereotype')} "
              "(0.5: no preference); "
              + "; ".join(f"{a.removesuffix('_score').upper()} acc {shown(a, pretrained, 'acc')}, bias score ambiguous "
                          f"{shown(a, pretrained, 'amb_bias_score')}, disambiguated {shown(a, pretrained, 'disamb_bias_score')}"
                          for a in bias[1:])
              + " (shipped samples)")

if __name__ == "__main__":
    sys.exit(main())
