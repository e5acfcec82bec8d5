"""Supervised fine-tuning as assets: instruction examples, and the fine-tuning dataset made from them."""

import time

import dagster as dg
import polars as pl
from pydantic import Field, model_validator

from lm_assets.defs.common.environment import DEFAULT_MMLU_PATH, fill_from_environment, project_path
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.reporting import fenced, markdown_table
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.sample_defaults import defaults_note, launchpad_default
from lm_assets.defs.decontam.assets import DECONTAM_DEFAULTS, contamination_index
from lm_assets.defs.training.assets import TRAIN_DEFAULTS, TrainingLauncher, TrainingRunConfig, launch_training
from lm_assets.sft.instructions import MAX_CHARS, MAX_MESSAGES
from lm_assets.storage.layout import (
    INSTRUCTION_KEYS,
    INSTRUCTIONS_FOLDER,
    PREFERENCE_KEYS,
    PREFERENCES_FOLDER,
    RATINGS_FOLDER,
    SFT_KEYS,
    TOKENIZER_KEYS,
    samples_key,
)

SHIPPED_INSTRUCTIONS = "data/instructions/sample.jsonl"
SHIPPED_PREFERENCES = "data/preferences/sample.jsonl"


class InstructionDataConfig(dg.Config):
    include_shipped: bool = Field(
        default=True, description=f"also the instruction set the project ships ({SHIPPED_INSTRUCTIONS}: 36 examples, "
        "English and Chinese)",
    )
    mmlu_path: str | None = Field(
        default=None, description="MMLU's zip, whose questions no example may share n-grams with; unset: "
        "$LM_ASSETS_MMLU_PATH, else data/eval/mmlu.zip; empty: not checked",
    )
    ceval_paths: list[str] = Field(default=[], description="C-Eval zips or folders checked the same way")
    max_messages: int = Field(default=MAX_MESSAGES, ge=2, description="messages an example may have; more: quarantined as "
                              "`too_many_messages`")  # fmt: skip
    max_chars: int = Field(default=MAX_CHARS, ge=1, description="characters of content an example may have; more: "
                           "quarantined as `too_many_chars`")  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(data, {"mmlu_path": ("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)},
                                     paths=("mmlu_path", "ceval_paths"))  # fmt: skip


@dg.asset(
    group_name="sft", kinds={"polars"},
    description="Chat examples (system, user, assistant; multi-turn) from the landing location's instructions/ "
    "folder (JSONL or Parquet) and the shipped set: validated, exact duplicates and examples sharing n-grams with "
    "the benchmarks dropped, every other row quarantined with its file, line and reason.",
)
def instruction_data(
    context: dg.AssetExecutionContext, config: InstructionDataConfig, storage: StorageResource, landing: LandingResource
) -> dg.MaterializeResult:
    from lm_assets.sft.instructions import read_examples

    files = chat_files(landing, INSTRUCTIONS_FOLDER, SHIPPED_INSTRUCTIONS if config.include_shipped else None,
                       "instruction", "include_shipped")  # fmt: skip
    examples, dropped = read_examples(files, config.max_messages, config.max_chars)
    examples, dropped, benchmarks = drop_contaminated(examples, dropped, "example_id", config.mmlu_path,
                                                      config.ceval_paths)  # fmt: skip
    store = storage.storage()
    store.write_parquet(INSTRUCTION_KEYS["examples"], examples)
    store.write_parquet(INSTRUCTION_KEYS["dropped"], dropped)
    return dg.MaterializeResult(metadata={
        "examples": examples.height,
        **accounting(examples, dropped, files, benchmarks),
        "path": dg.MetadataValue.path(store.uri(INSTRUCTION_KEYS["examples"])),
    })


def chat_files(landing: LandingResource, folder: str, shipped: str | None, what: str, switch: str,
               also: list[tuple[str, bytes]] = ()) -> list[tuple[str, bytes]]:  # fmt: skip
    """(name, bytes) of the shipped file (when given), of every JSONL or Parquet file under the landing
    location's `folder`, and `also`."""
    incoming, files = landing.storage(), []
    if shipped:
        with open(project_path(shipped), "rb") as f:
            files.append((shipped, f.read()))
    theirs = [k for k in incoming.list(folder) if k.endswith((".jsonl", ".parquet"))] if incoming.exists(folder) else []
    files += [(incoming.uri(k), incoming.read_bytes(k)) for k in sorted(theirs)] + list(also)
    if not files:
        raise dg.Failure(f"no {what} files: put JSONL or Parquet files under {incoming.uri(folder)}/ or set {switch}")
    return files


def drop_contaminated(rows: pl.DataFrame, dropped: pl.DataFrame, id_column: str, mmlu_path: str | None,
                      ceval_paths: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, str]:  # fmt: skip
    """`rows` (with a `text` column) less those sharing n-grams with the benchmarks, which join `dropped`
    with their reason; and the benchmarks checked."""
    from lm_assets.corpus.decontam.contamination import find_contamination
    from lm_assets.sft.instructions import DROPPED_SCHEMA

    paths = [p for p in (mmlu_path, *ceval_paths) if p]
    if not paths or not rows.height:
        return rows, dropped, "none"
    index = contamination_index(mmlu_path or None, tuple(ceval_paths), DECONTAM_DEFAULTS)
    result = find_contamination(rows.select(pl.col(id_column).alias("doc_id"), "text"), index)
    contaminated = result.dropped.rename({"doc_id": id_column})
    lost = rows.join(contaminated, on=id_column).select(
        "file", "line", pl.col(id_column).alias("example_id"), "reason", pl.lit(None).alias("detail")).cast(DROPPED_SCHEMA)  # fmt: skip
    return (rows.join(contaminated.select(id_column), on=id_column, how="anti"), pl.concat([dropped, lost]),
            ", ".join(index.benchmarks))  # fmt: skip


def accounting(kept: pl.DataFrame, dropped: pl.DataFrame, files: list, benchmarks: str) -> dict:
    reasons = dropped.group_by("reason").len().sort("reason")
    return {
        "rows_read": kept.height + dropped.height,
        "dropped": dropped.height,
        "files": len(files),
        "by_language": dg.MetadataValue.json(dict(kept.group_by("lang").len().sort("lang").iter_rows())),
        "dropped_by_reason": markdown_table(reasons) if dropped.height else "_none_",
        "checked_against": benchmarks,
    }


class PreferenceDataConfig(dg.Config):
    include_shipped: bool = Field(
        default=True, description=f"also the preference pairs the project ships ({SHIPPED_PREFERENCES}: 64 pairs, "
        "English and Chinese)",
    )
    mmlu_path: str | None = Field(
        default=None, description="MMLU's zip, whose questions no pair may share n-grams with; unset: "
        "$LM_ASSETS_MMLU_PATH, else data/eval/mmlu.zip; empty: not checked",
    )
    ceval_paths: list[str] = Field(default=[], description="C-Eval zips or folders checked the same way")
    rating_margin: float | None = Field(
        default=2.0, ge=0.5, le=4.0, description="pairs from people's ratings (human_ratings' sheets under ratings/): "
        "a checkpoint's two decodings of one prompt rated at least this far apart; null: none",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(data, {"mmlu_path": ("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)},
                                     paths=("mmlu_path", "ceval_paths"))  # fmt: skip


def rated_pair_file(store, margin: float) -> tuple[str, bytes, int, list[dict]] | None:
    """The pairs people's ratings make, as one JSONL "file" for `read_pairs` (its name says where they come
    from), how many rated samples there were, and the sheets' problem lines; None without rating sheets."""
    import json

    from lm_assets.evaluation.ratings import rated_pairs, read_ratings

    if not store.exists(RATINGS_FOLDER):
        return None
    files = sorted(k for k in store.list(RATINGS_FOLDER) if k.endswith(".jsonl"))
    ratings, problems = read_ratings((k, store.read_bytes(k)) for k in files)
    checkpoints = {c for c in ratings["checkpoint"].unique().to_list() if store.exists(samples_key(c))}
    pairs = rated_pairs(ratings, {c: store.read_parquet(samples_key(c)) for c in checkpoints}, margin)
    data = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs).encode()
    rated = int(ratings["rating"].is_not_null().sum())
    return f"{store.uri(RATINGS_FOLDER)}/ (pairs of rated samples)", data, rated, problems


@dg.asset(
    group_name="sft", kinds={"polars"}, deps=["human_ratings"],
    description="Preference pairs (a prompt, a chosen and a rejected answer) from the landing location's "
    "preferences/ folder (JSONL or Parquet; HH-RLHF's whole conversations or UltraFeedback-binarized's prompt and "
    "answers), the shipped set, and pairs made from people's ratings of a checkpoint's samples: validated, exact duplicates and pairs sharing n-grams with the benchmarks "
    "dropped, every other row quarantined with its file, line and reason.",
)
def preference_data(
    context: dg.AssetExecutionContext, config: PreferenceDataConfig, storage: StorageResource, landing: LandingResource
) -> dg.MaterializeResult:
    from lm_assets.sft.preferences import read_pairs

    store = storage.storage()
    rated = rated_pair_file(store, config.rating_margin) if config.rating_margin is not None else None
    files = chat_files(landing, PREFERENCES_FOLDER, SHIPPED_PREFERENCES if config.include_shipped else None,
                       "preference", "include_shipped", also=[rated[:2]] if rated else [])  # fmt: skip
    pairs, dropped = read_pairs(files)
    pairs, dropped, benchmarks = drop_contaminated(pairs, dropped, "pair_id", config.mmlu_path, config.ceval_paths)
    store.write_parquet(PREFERENCE_KEYS["pairs"], pairs)
    store.write_parquet(PREFERENCE_KEYS["dropped"], dropped)
    return dg.MaterializeResult(metadata={
        "pairs": pairs.height,
        **accounting(pairs, dropped, files, benchmarks),
        "by_layout": dg.MetadataValue.json(dict(pairs.group_by("source").len().sort("source").iter_rows())),
        "from_ratings": dg.MetadataValue.md(
            f"{pairs.filter(pl.col('file') == rated[0]).height} pair(s) from {rated[2]} rated samples "
            f"(decodings rated at least {config.rating_margin} apart)" if rated else "no rating sheets under ratings/"),
        **({"rating_problems": len(rated[3]), "rating_problem_lines": markdown_table(pl.DataFrame(rated[3]))}
           if rated and rated[3] else {}),
        "path": dg.MetadataValue.path(store.uri(PREFERENCE_KEYS["pairs"])),
    })


class SftDatasetConfig(dg.Config):
    seq_len: int = Field(default=launchpad_default("sft_dataset", "seq_len", 1025),
                         description="tokens per packed row; an example must fit whole, with its EOS"
                         + defaults_note("sft_dataset"))
    val_fraction: float = Field(default=0.1, description="share of examples (by a hash of their id) held out for val")


def masked_view(sp, ids, mask) -> str:
    """An example as the loss sees it: scored tokens between ⟦ and ⟧."""
    out, inside = [], False
    for token, scored in zip(ids.tolist(), mask.tolist()):
        if scored and not inside:
            out.append("⟦")
        if not scored and inside:
            out.append("⟧")
        inside = bool(scored)
        out.append(sp.decode([token]) if not sp.is_control(token) else sp.id_to_piece(token))
    return "".join(out) + ("⟧" if inside else "")


@dg.asset(
    group_name="sft", kinds={"sentencepiece", "numpy"}, deps=[instruction_data, "tokenizer"],
    description="The instruction examples in the chat format, tokenized by the corpus tokenizer with the chat markers "
    "appended, the loss masked to the assistant's tokens, packed whole into rows with EOS between examples (the "
    "trainer's document masks keep them apart); the tokenizer and its chat template, for the export.",
)
def sft_dataset(context: dg.AssetExecutionContext, config: SftDatasetConfig, storage: StorageResource) -> dg.MaterializeResult:
    from lm_assets.corpus.tokens.tokenizer import load_tokenizer, special_ids, tokenizer_hash
    from lm_assets.sft.chat import CHAT_TEMPLATE, chat_tokenizer, encode_example
    from lm_assets.sft.packing import pack_examples, write_sft_packed

    store = storage.storage()
    if not store.exists(TOKENIZER_KEYS["model"]) or not store.exists(INSTRUCTION_KEYS["examples"]):
        raise dg.Failure("materialize tokenizer and instruction_data first")
    started = time.perf_counter()
    model, added = chat_tokenizer(store.read_bytes(TOKENIZER_KEYS["model"]))
    sp = load_tokenizer(model)
    ids = special_ids(sp)
    examples = store.read_parquet(INSTRUCTION_KEYS["examples"])
    encoded = [(eid, *encode_example(sp, messages)) for eid, messages in zip(examples["example_id"], examples["messages"])]
    packed, too_long = pack_examples(encoded, config.seq_len, ids["eos"], ids["pad"], config.val_fraction)
    store.write_bytes(SFT_KEYS["tokenizer"], model)
    store.write_bytes(SFT_KEYS["chat_template"], CHAT_TEMPLATE.encode())
    folder = store.local_path(SFT_KEYS["packed"])
    manifest = write_sft_packed(packed, folder, sp.get_piece_size(), ids["eos"], ids["pad"], {
        "tokenizer_hash": tokenizer_hash(model), "base_tokenizer_hash": tokenizer_hash(store.read_bytes(TOKENIZER_KEYS["model"])),
        "chat_pieces_added": added, "too_long": too_long, "seq_len": config.seq_len})  # fmt: skip
    first = next((e for e in encoded if e[0] not in too_long), None)
    splits = manifest["splits"]
    return dg.MaterializeResult(metadata={
        "examples": dg.MetadataValue.json({s: v["examples"] for s, v in splits.items()}),
        "too_long": len(too_long),
        "train_sequences": splits["train"]["sequences"],
        "scored_share": dg.MetadataValue.float(round(sum(v["scored_tokens"] for v in splits.values())
                                                     / max(1, sum(v["tokens"] for v in splits.values())), 4)),
        "vocab_size": sp.get_piece_size(),
        "chat_pieces_added": dg.MetadataValue.json(added),
        "chat_template": dg.MetadataValue.md(fenced(CHAT_TEMPLATE)),
        "example_as_scored": dg.MetadataValue.md(fenced(masked_view(sp, first[1], first[2]))) if first else "_none_",
        "path": dg.MetadataValue.path(str(folder)),
        "seconds": dg.MetadataValue.text(f"{time.perf_counter() - started:.2f}"),
    })


class PreferenceDatasetConfig(dg.Config):
    seq_len: int = Field(default=1025, ge=4, description="tokens per row: a pair's two conversations, each with its EOS, "
                         "must fit in one; longer pairs are listed as too long")  # fmt: skip
    val_fraction: float = Field(default=0.2, ge=0.0, lt=1.0,
                                description="share of pairs (by a hash of their id) held back to measure the alignment")


@dg.asset(
    group_name="sft", kinds={"sentencepiece", "numpy"}, deps=[preference_data, "tokenizer"],
    description="The preference pairs in sft_dataset's chat format and tokenizer, one pair to a row: the chosen "
    "conversation and the rejected one, each ending in EOS (the document masks keep them apart), each answer's "
    "scored tokens marked as chosen or rejected; a val split of held-back pairs.",
)
def preference_dataset(context: dg.AssetExecutionContext, config: PreferenceDatasetConfig,
                       storage: StorageResource) -> dg.MaterializeResult:  # fmt: skip
    import json

    from lm_assets.corpus.tokens.tokenizer import load_tokenizer, special_ids, tokenizer_hash
    from lm_assets.sft.chat import chat_tokenizer, encode_example
    from lm_assets.sft.packing import pack_pairs, write_preference_packed

    store = storage.storage()
    if not store.exists(TOKENIZER_KEYS["model"]) or not store.exists(PREFERENCE_KEYS["pairs"]):
        raise dg.Failure("materialize tokenizer and preference_data first")
    model, added = chat_tokenizer(store.read_bytes(TOKENIZER_KEYS["model"]))
    sp = load_tokenizer(model)
    ids = special_ids(sp)
    pairs = store.read_parquet(PREFERENCE_KEYS["pairs"])
    encoded = []
    for row in pairs.iter_rows(named=True):
        prompt = json.loads(row["prompt"])
        chosen = encode_example(sp, prompt + [{"role": "assistant", "content": row["chosen"]}])
        rejected = encode_example(sp, prompt + [{"role": "assistant", "content": row["rejected"]}])
        encoded.append((row["pair_id"], *chosen, *rejected))
    packed, too_long = pack_pairs(encoded, config.seq_len, ids["eos"], ids["pad"], config.val_fraction)
    folder = store.local_path(PREFERENCE_KEYS["packed"])
    manifest = write_preference_packed(packed, folder, sp.get_piece_size(), ids["eos"], ids["pad"], {
        "tokenizer_hash": tokenizer_hash(model), "chat_pieces_added": added, "too_long": too_long})  # fmt: skip
    splits = manifest["splits"]
    first = next((e for e in encoded if e[0] not in too_long), None)
    return dg.MaterializeResult(metadata={
        "pairs": dg.MetadataValue.json({s: v["pairs"] for s, v in splits.items()}),
        "too_long": len(too_long),
        "seq_len": config.seq_len,
        "answer_tokens": dg.MetadataValue.json({s: {"chosen": v["chosen_tokens"], "rejected": v["rejected_tokens"]}
                                                for s, v in splits.items()}),  # fmt: skip
        "tokenizer_hash": tokenizer_hash(model),
        "chosen_as_scored": dg.MetadataValue.md(fenced(masked_view(sp, first[1], first[2]))) if first else "_none_",
        "rejected_as_scored": dg.MetadataValue.md(fenced(masked_view(sp, first[3], first[4]))) if first else "_none_",
        "path": dg.MetadataValue.path(str(folder)),
    })


def sft_default(field: str, fallback):
    """sft_run's default for `field`: the sample crawl's under `make ui`, else its own."""
    return launchpad_default("sft_run", field, fallback)


class SftRunConfig(TrainingRunConfig):
    """Fine-tuning: training_run's knobs, starting from a pretraining checkpoint."""

    run_name: str = Field(
        default="sft", description="the fine-tuning run's name: its checkpoints go under `checkpoints/<run_name>/` and "
        "their partitions are `<run_name>-step_<n>`, evaluated as every checkpoint is",
    )
    base_checkpoint: str = Field(
        default="", description="the checkpoints partition to start from (e.g. main-step_00000040); empty: the latest "
        "one of run base_run",
    )
    base_run: str = Field(default="main", description="with base_checkpoint empty: the run whose latest checkpoint is taken")
    steps: int = Field(default=sft_default("steps", 30),
                       description="optimizer steps the run ends at" + defaults_note("sft_run"))
    lr: float = Field(default=sft_default("lr", 1e-4),
                      description="peak learning rate, after warmup, decayed by a cosine to a tenth of it")
    warmup_steps: int = Field(default=sft_default("warmup_steps", 3), description="steps of linear warmup to lr")
    save_every: int = Field(default=sft_default("save_every", 0),
                            description="a checkpoint every this many steps, and one at the end; 0: only at the end")
    # training_run's layout defaults are pretraining's; fine-tuning has its own.
    pp: int = Field(default=sft_default("pp", TRAIN_DEFAULTS.parallel.pp),
                    description="pipeline-parallel degree: stages the model's layers are split into")
    tp: int = Field(default=sft_default("tp", TRAIN_DEFAULTS.parallel.tp), description="tensor-parallel degree")
    dp: int = Field(default=sft_default("dp", 1), description="data-parallel degree; the run has pp × tp × dp ranks")
    zero_stage: int = Field(default=sft_default("zero_stage", TRAIN_DEFAULTS.zero_stage),
                            description="DeepSpeed ZeRO stage 0-3; with pipeline parallelism (pp > 1) at most 1")
    micro_batch_size: int = Field(default=sft_default("micro_batch_size", TRAIN_DEFAULTS.micro_batch_size),
                                  description="sequences per rank per micro-step")
    max_seq_len: int | None = Field(default=sft_default("max_seq_len", None),
                                    description="the model's context; unset: the base checkpoint's")
    adapter: str = Field(default="none", description="`lora`: low-rank adapters on the target layers, the rest frozen; "
                         "only the adapters train and are saved, exported as a PEFT folder and merged. `none`: every weight")
    adapter_rank: int = Field(default=8, ge=1, description="the adapters' rank r")
    adapter_alpha: float = Field(default=16.0, gt=0, description="the adapters' alpha: their update is scaled by alpha / r")
    adapter_dropout: float = Field(default=0.0, ge=0, lt=1, description="dropout on the adapters' input while training")
    adapter_targets: list[str] = Field(default=["q_proj", "k_proj", "v_proj", "o_proj"],
                                       description="the layers adapted, of q_proj, k_proj, v_proj, o_proj, gate_proj, "
                                       "up_proj, down_proj")  # fmt: skip

    def train_config(self, data: str, checkpoint_dir: str, tokenizer_model: str, seq_len: int) -> dict:
        # The base checkpoint's architecture and context, unless max_seq_len says otherwise.
        base = super().train_config(data, checkpoint_dir, tokenizer_model, seq_len)
        adapter = {"type": self.adapter, "rank": self.adapter_rank, "alpha": self.adapter_alpha,
                   "dropout": self.adapter_dropout, "target_modules": list(self.adapter_targets)}  # fmt: skip
        return base | {"model_overrides": [f"max_seq_len={self.max_seq_len}"] if self.max_seq_len else [],
                       "adapter": adapter}  # fmt: skip


def base_checkpoint(context: dg.AssetExecutionContext, store, config: SftRunConfig) -> tuple[str, str]:
    """The storage key of the HF export of the checkpoint fine-tuning starts from (made now if missing), and
    the checkpoint's partition key."""
    from lm_assets.defs.evaluation.common import hf_export

    known = context.instance.get_dynamic_partitions(checkpoint_partitions.name)
    chosen = config.base_checkpoint or next((k for k in reversed(known) if k.startswith(f"{config.base_run}-step_")), "")
    if chosen not in known:
        raise dg.Failure(f"no checkpoint {chosen or 'of run ' + config.base_run!r} to fine-tune: train first, or set "
                         f"base_checkpoint to one of {known[-5:]}")  # fmt: skip
    if chosen.startswith(f"{config.run_name}-"):
        raise dg.Failure(f"base_checkpoint {chosen} is one of this fine-tuning run's own")
    folder = hf_export(store, chosen)
    return str(folder.relative_to(store.local_path(""))), chosen


@dg.multi_asset(
    name="sft_run",  # the op, and the key of its run config: `ops: {sft_run: {config: ...}}`
    specs=[
        dg.AssetSpec("sft_run", deps=[sft_dataset, "checkpoint"], group_name="sft", kinds={"deepspeed", "pytorch"},
                     description="Supervised fine-tuning of a pretraining checkpoint on sft_dataset: the same training "
                     "program, engine, parallel layouts and Pipes as training_run, the loss on assistant tokens only, "
                     "the chat markers added to the vocabulary (mean-initialized rows)."),
        dg.AssetSpec("sft_checkpoint", deps=[sft_dataset, "checkpoint"], group_name="sft", kinds={"deepspeed", "safetensors"},
                     description="The fine-tuning run's checkpoints, each a `checkpoints` partition evaluated like any "
                     "other, the latest exported for HF with the chat template (tokenizer.apply_chat_template)."),
    ],
)
def sft_run_and_checkpoint(
    context: dg.AssetExecutionContext,
    config: SftRunConfig,
    storage: StorageResource,
    training_launcher: TrainingLauncher,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    store = storage.storage()
    if not store.exists(SFT_KEYS["tokenizer"]):
        raise dg.Failure("no sft_dataset yet: materialize it first")
    base_key, chosen = base_checkpoint(context, store, config)
    context.log.info(f"fine-tuning from {chosen} ({base_key})")
    yield from launch_training(
        context, config, storage, training_launcher, pipes_subprocess_client, data_key=SFT_KEYS["packed"],
        tokenizer_key=SFT_KEYS["tokenizer"], path_settings={"init_from": base_key},
        settings={"run_asset": "sft_run", "checkpoint_asset": "sft_checkpoint"},
    )


def dpo_default(field: str, fallback):
    """dpo_run's default for `field`: the sample crawl's under `make ui`, else its own."""
    return launchpad_default("dpo_run", field, fallback)


class DpoRunConfig(SftRunConfig):
    """Direct preference optimization: sft_run's knobs, DPO's own, starting from a fine-tuned checkpoint."""

    run_name: str = Field(
        default="dpo", description="the alignment run's name: its checkpoints go under `checkpoints/<run_name>/` and "
        "their partitions are `<run_name>-step_<n>`, evaluated as every checkpoint is",
    )
    base_run: str = Field(default="sft", description="with base_checkpoint empty: the run whose latest checkpoint is "
                          "taken (the reference DPO stays near)")  # fmt: skip
    steps: int = Field(default=dpo_default("steps", 100), description="optimizer steps the run ends at" + defaults_note("dpo_run"))
    lr: float = Field(default=dpo_default("lr", 5e-6), description="peak learning rate, after warmup, decayed by a cosine "
                      "to a tenth of it (DPO's is far below fine-tuning's; with adapters, higher)")  # fmt: skip
    warmup_steps: int = Field(default=dpo_default("warmup_steps", 10), description="steps of linear warmup to lr")
    micro_batch_size: int = Field(default=dpo_default("micro_batch_size", TRAIN_DEFAULTS.micro_batch_size),
                                  description="preference pairs per rank per micro-step (a pair to a row)")
    beta: float = Field(default=dpo_default("beta", 0.1), gt=0, description="DPO's beta: how far from the reference "
                        "the policy may move (higher: closer)")  # fmt: skip
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5, description="conservative DPO: the probability that a "
                                   "pair's preference is flipped (0: plain DPO)")  # fmt: skip
    loss_type: str = Field(default="sigmoid", description="`sigmoid` (DPO, and cDPO with label_smoothing) or `robust` (rDPO)")
    reference: str = Field(
        default="precomputed", description="the reference is the checkpoint DPO starts from: `precomputed`, its "
        "log-probabilities of every pair computed once before the first step (one model held, a resume exact), or "
        "with an adapter `adapter-disabled`, the base with the adapter switched off beside each step",
    )

    def train_config(self, data: str, checkpoint_dir: str, tokenizer_model: str, seq_len: int) -> dict:
        dpo = {"beta": self.beta, "label_smoothing": self.label_smoothing, "loss_type": self.loss_type,
               "reference": self.reference}  # fmt: skip
        return super().train_config(data, checkpoint_dir, tokenizer_model, seq_len) | {"objective": "dpo", "dpo": dpo}


@dg.multi_asset(
    name="dpo_run",  # the op, and the key of its run config: `ops: {dpo_run: {config: ...}}`
    specs=[
        dg.AssetSpec("dpo_run", deps=[preference_dataset, "sft_checkpoint"], group_name="sft", kinds={"deepspeed", "pytorch"},
                     description="Direct preference optimization of a fine-tuned checkpoint (default: sft's latest) on "
                     "preference_dataset: the same training program, engine, layouts (data and tensor parallel, ZeRO) "
                     "and Pipes; the reference is the starting checkpoint, its scores precomputed; reward accuracy, "
                     "margin and KL to the reference on held-back pairs at the start and the end."),
        dg.AssetSpec("dpo_checkpoint", deps=[preference_dataset, "sft_checkpoint"], group_name="sft",
                     kinds={"deepspeed", "safetensors"},
                     description="The alignment run's checkpoints, each a `checkpoints` partition (`dpo-step_N`) "
                     "evaluated like any other, the latest exported for HF with the chat template (with an adapter: "
                     "a PEFT adapter folder too)."),
    ],
)
def dpo_run_and_checkpoint(
    context: dg.AssetExecutionContext,
    config: DpoRunConfig,
    storage: StorageResource,
    training_launcher: TrainingLauncher,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    store = storage.storage()
    if not store.exists(f"{PREFERENCE_KEYS['packed']}/manifest.json"):
        raise dg.Failure("no preference_dataset yet: materialize it first")
    if not store.exists(SFT_KEYS["tokenizer"]):
        raise dg.Failure("no sft_dataset yet (its tokenizer, with the chat markers, is the pairs'): materialize it first")
    base_key, chosen = base_checkpoint(context, store, config)
    context.log.info(f"aligning {chosen} ({base_key}) with preference pairs")
    yield from launch_training(
        context, config, storage, training_launcher, pipes_subprocess_client, data_key=PREFERENCE_KEYS["packed"],
        tokenizer_key=SFT_KEYS["tokenizer"], path_settings={"init_from": base_key},
        settings={"run_asset": "dpo_run", "checkpoint_asset": "dpo_checkpoint"},
    )
