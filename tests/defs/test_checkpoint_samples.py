"""checkpoint_samples: a checkpoint's continuations of the fixed prompts as metadata and a parquet file,
and the evaluation sensor requesting only what a checkpoint lacks."""

import os

import dagster as dg
import polars as pl
import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import STORAGE_ROOT_VARIABLE, StorageResource, s3_resource_from_env
from lm_assets.defs.evaluation.assets import checkpoint_evaluation_sensor, checkpoint_samples
from lm_assets.evaluation import SAMPLE_PROMPTS, generate, load_model
from lm_assets.reporting.evaluation import samples_table
from lm_assets.storage.layout import checkpoint_key, checkpoint_run_folder, samples_key
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)

CHECKPOINT = checkpoint_key("main", "step_00000004")
SENTENCES = [
    "The capital of France is Paris, a city on the river.",
    "Once upon a time, in a small village by the sea, there lived a fisher.",
    "中国的首都是北京。学习一门新语言最好的方法是每天练习。",
    "很久很久以前，在一个海边的小村庄里，住着一位老人。",
] * 4


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory):
    """A storage root holding one checkpoint's HF export, where the training assets put it."""
    root = tmp_path_factory.mktemp("storage")
    tok = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=400, num_threads=1), tmp_path_factory.mktemp("tok"))
    cfg = from_preset("tiny", 400, max_seq_len=64)
    hf = root / checkpoint_run_folder("main") / "step_00000004" / "hf"
    export_hf(Transformer(cfg, seed=2).eval(), cfg, hf, tokenizer_model_path=tok.path)
    return root


def materialize_samples(root, instance, config: dict) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [checkpoint_samples], partition_key=CHECKPOINT, instance=instance,
        resources={"storage": StorageResource(root=str(root), s3=s3_resource_from_env())},
        run_config={"ops": {"checkpoint_samples": {"config": config}}}, raise_on_error=False,
    )  # fmt: skip


def test_samples_of_a_checkpoint_show_in_its_metadata_and_file(storage_root):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [CHECKPOINT])
    result = materialize_samples(storage_root, instance, {"max_new_tokens": 12, "device": "cpu", "seed": 5})
    assert result.success
    meta = result.get_asset_materialization_events()[0].materialization.metadata

    samples = pl.read_parquet(meta["samples_parquet"].value)
    assert meta["samples_parquet"].value == str(storage_root / samples_key(CHECKPOINT))
    assert samples["prompt"].to_list() == list(SAMPLE_PROMPTS)
    em = load_model(storage_root / "checkpoints" / "main" / "step_00000004" / "hf")
    prompt_ids = [em.encode(p) for p in SAMPLE_PROMPTS]
    greedy = generate(em.model, prompt_ids, 12, eos_id=em.tokenizer.eos_id())
    assert samples["greedy_ids"].to_list() == greedy.tokens
    sampled = generate(em.model, prompt_ids, 12, do_sample=True, temperature=0.8, top_p=0.95, seed=5,
                       eos_id=em.tokenizer.eos_id())  # fmt: skip
    assert samples["sampled_ids"].to_list() == sampled.tokens
    from lm_assets.evaluation.samples import shown_text

    for prompt, ids, text in zip(prompt_ids, greedy.tokens, samples["greedy"]):
        assert shown_text(em.tokenizer, prompt) + text == shown_text(em.tokenizer, prompt + ids)
        assert "\ufffd" not in text or "\ufffd" in em.tokenizer.decode(prompt)  # stray bytes show as ⟨0x..⟩

    assert meta["samples_full"].value.startswith("| prompt | greedy | sampled |")
    table = meta["samples"].value
    assert table.splitlines()[:2] == ["| prompt | greedy | sampled |", "|---|---|---|"]
    rows, *note = table.split("\n\n")
    assert len(rows.splitlines()) == 2 + len(SAMPLE_PROMPTS)
    # An untrained model writes stray bytes, and the page says what they are.
    # An untrained model writes stray bytes, and the page says what they are, as it says what each mark means.
    assert ("⟨0x" in rows) == ("⟨0x91⟩ and the like: a byte the model wrote" in "".join(note))
    assert ("[EOS]" in rows) == ("[EOS]: the model ended its text there" in "".join(note))
    assert all(prompt in table for prompt in SAMPLE_PROMPTS)
    # Settings and sizes are text, which the Plots tab does not draw as flat lines.
    expected = {"max_new_tokens": "12", "temperature": "0.8", "top_p": "0.95", "seed": "5", "device": "cpu",
                "dtype": "float32", "prompts": "6", "max_seq_len": "64", "truncated_prompts": "0"}  # fmt: skip
    assert {k: meta[k].value for k in expected} == expected
    assert "top_k" not in meta and "top_k off" in meta["decoding"].value
    assert meta["model"].value.endswith("step_00000004/hf")
    assert meta["new_tokens"].value == f"{sum(len(t) for t in greedy.tokens + sampled.tokens):,}"
    assert meta["parameters"].value == f"{sum(p.numel() for p in em.model.parameters()):,}"


def test_the_table_marks_cut_prompts_and_continuations_that_ended_at_eos():
    samples = pl.DataFrame({
        "prompt": ["a long prompt", "中国的首都是"], "greedy": ["", "北京|上海\n"], "sampled": ["x", "y"],
        "prompt_truncated": [True, False], "greedy_stop": ["eos", "length"], "sampled_stop": ["length", "eos"],
    })
    assert samples_table(samples).splitlines() == [
        "| prompt | greedy | sampled |", "|---|---|---|",
        "| …a long prompt |  [EOS] | x |",
        "| 中国的首都是 | 北京\\|上海 ↵  | y [EOS] |",
        "",
        "_…: the prompt was cut at its start to fit the context; ↵: a line break the model wrote (↵×N: N of them); "
        "[EOS]: the model ended its text there_",
    ]
    odd = samples.with_columns(pl.Series("sampled", ["x", "buffer.⟨0x91⟩会"])).head(2)
    lines = samples_table(odd).splitlines()
    assert lines[3] == "| 中国的首都是 | 北京\\|上海 ↵  | buffer.⟨0x91⟩会 [EOS] |"
    assert lines[-1] == ("_…: the prompt was cut at its start to fit the context; ↵: a line break the model wrote "
                         "(↵×N: N of them); [EOS]: the model ended its text there; ⟨0x91⟩ and the like: a byte the "
                         "model wrote that forms no UTF-8 character_")
    assert "UTF-8" not in samples_table(samples)


def test_the_samples_show_in_place_whatever_the_model_writes():
    from lm_assets.charts import INLINE_LIMIT
    from lm_assets.reporting.evaluation import inline_samples_table

    rambling = pl.DataFrame({
        "prompt": [f"Prompt number {i} asks for a long answer about the harbour" for i in range(6)],
        "greedy": ["\n" * 40] * 6, "sampled": ["word " * 40] * 6, "prompt_truncated": [False] * 6,
        "greedy_stop": ["length"] * 6, "sampled_stop": ["eos"] * 6,
    })
    assert len(samples_table(rambling)) > INLINE_LIMIT
    shown = inline_samples_table(rambling)
    assert len(shown) <= INLINE_LIMIT and shown.count("| Prompt number") == 6
    assert "↵×40" in shown and "↵: a line break the model wrote" in shown and "[EOS]: the model ended" in shown


def test_settings_the_model_cannot_run_fail_with_the_reason(storage_root):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [CHECKPOINT])
    result = materialize_samples(storage_root, instance, {"max_new_tokens": 64, "device": "cpu"})
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "max_new_tokens must be in [1, 63]" in failure.event_specific_data.error.message


def test_the_sensor_requests_only_the_evaluation_a_checkpoint_lacks(storage_root, monkeypatch):
    from lm_assets.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [CHECKPOINT, "main-step_00000008"])

    def requests():
        with dg.build_sensor_context(instance=instance) as context:
            return list(checkpoint_evaluation_sensor(context).run_requests)

    assert [(r.partition_key, r.run_key, r.asset_selection) for r in requests()] == [
        (CHECKPOINT, f"evaluate:{CHECKPOINT}", None), ("main-step_00000008", "evaluate:main-step_00000008", None)]
    from lm_assets.defs.evaluation.jobs import EVALUATION_ASSET_NAMES

    for name in set(EVALUATION_ASSET_NAMES) - {"checkpoint_samples"}:  # evaluated before checkpoint_samples existed
        instance.report_runless_asset_event(dg.AssetMaterialization(name, partition=CHECKPOINT))
    first = requests()[0]
    assert (first.partition_key, first.run_key, first.asset_selection) == (
        CHECKPOINT, f"evaluate:{CHECKPOINT}:checkpoint_samples", [dg.AssetKey("checkpoint_samples")])
    assert requests()[1].run_key == "evaluate:main-step_00000008"

    # The request runs as the code location's evaluation_job would run it: checkpoint_samples alone.
    monkeypatch.setenv(STORAGE_ROOT_VARIABLE, str(storage_root))
    result = defs.resolve_job_def("evaluation_job").execute_in_process(
        partition_key=first.partition_key, asset_selection=first.asset_selection, instance=instance,
        run_config={"ops": {"checkpoint_samples": {"config": {"max_new_tokens": 4, "device": "cpu"}}}},
    )
    assert [e.asset_key for e in result.get_asset_materialization_events()] == [dg.AssetKey("checkpoint_samples")]
    assert [r.partition_key for r in requests()] == ["main-step_00000008"]


def test_bytes_that_form_no_character_are_shown_as_bytes(tmp_path):
    from lm_assets.evaluation.samples import shown_text

    sp = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=400, num_threads=1), tmp_path).processor()
    ids = sp.encode("The capital")
    lone = sp.piece_to_id("<0x91>")
    char = [sp.piece_to_id(f"<0x{b:02X}>") for b in "会".encode()]
    assert sp.decode(ids + [lone] + char) == "The capital\ufffd会"  # what the model wrote: one stray byte, then a character
    assert shown_text(sp, ids + [lone] + char) == "The capital⟨0x91⟩会"
    assert shown_text(sp, ids + char) == sp.decode(ids + char) == "The capital会"  # whole characters stay as they are
    assert shown_text(sp, sp.encode("a \ufffd in the text")) == "a \ufffd in the text"  # a real U+FFFD is not a byte
