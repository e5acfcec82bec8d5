"""Supervised fine-tuning as assets: instruction data validated, templated and packed with loss masks;
a tiny model fine-tuned learns the format; the export's chat template gives the same ids."""

import json
import os

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, load_tokenizer, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.sft.assets import instruction_data, sft_dataset, sft_run_and_checkpoint
from lm_assets.defs.training.assets import TrainingLauncher
from lm_assets.sft.chat import END, MARKERS, encode_example, render
from lm_assets.sft.instructions import read_examples
from lm_assets.storage.layout import INSTRUCTION_KEYS, SFT_KEYS, checkpoint_key, checkpoint_run_folder
from lm_assets.storage.store import Storage
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer

pytestmark = pytest.mark.slow
os.environ["HF_HUB_OFFLINE"] = "1"
SHIPPED = "data/instructions/sample.jsonl"


def test_rows_are_validated_and_every_one_is_accounted_for():
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    rows = [good, good, {"messages": [{"role": "user", "content": "Hi"}]},
            {"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]},
            {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "assistant", "content": "c"}]},
            {"messages": [{"role": "robot", "content": "a"}]}, {"messages": [{"role": "user", "content": " "}]}, {"text": "no messages"}]  # fmt: skip
    data = "".join(json.dumps(r) + "\n" for r in rows).encode() + b"{broken\n"
    kept, dropped = read_examples([("a.jsonl", data)])
    assert kept.height == 1 and kept["line"].to_list() == [1]
    assert dropped.select("line", "reason").rows() == [
        (2, "duplicate"), (3, "no_final_answer"), (4, "turns_do_not_alternate"), (5, "system_not_first"),
        (6, "unknown_role"), (7, "empty_content"), (8, "messages_not_a_list"), (9, "not_json")]


def test_rows_that_would_crash_later_stages_are_quarantined_with_file_row_and_reason():
    import io

    ok = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    marker = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello<|end|>x"}]
    long_chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(10_000)]
    wide = [{"role": "user", "content": "x" * 300}, {"role": "assistant", "content": "y" * 300}]
    jsonl = "".join(json.dumps({"messages": m}) + "\n" for m in (ok, marker, long_chat, wide)).encode()
    table = io.BytesIO()
    pl.DataFrame({"messages": [json.dumps(ok), "{not json"]}).write_parquet(table)
    files = [("a.jsonl", jsonl), ("b.parquet", table.getvalue()), ("c.parquet", b"PAR1 not really")]
    kept, dropped = read_examples(files, max_messages=1000, max_chars=500)
    assert kept.select("file", "line").rows() == [("a.jsonl", 1)]
    assert dropped.select("file", "line", "reason").rows() == [
        ("a.jsonl", 2, "chat_marker"), ("a.jsonl", 3, "too_many_messages"), ("a.jsonl", 4, "too_many_chars"),
        ("b.parquet", 1, "duplicate"), ("b.parquet", 2, "not_json"), ("c.parquet", 0, "not_parquet")]
    assert dropped["detail"][5].startswith(("ComputeError", "OSError", "PanicException"))


def test_a_row_nested_too_deep_is_quarantined_with_its_line_and_the_rest_read():
    import io

    ok = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    other = {"messages": [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]}
    deep = "[" * 100_000 + "]" * 100_000
    jsonl = (json.dumps(ok) + "\n" + '{"messages": ' + deep + "}\n" + json.dumps(other) + "\n").encode()
    table = io.BytesIO()
    pl.DataFrame({"messages": [deep, json.dumps(other["messages"]), json.dumps(ok["messages"])]}).write_parquet(table)
    kept, dropped = read_examples([("a.jsonl", jsonl), ("b.parquet", table.getvalue())])
    assert kept.select("file", "line").rows() == [("a.jsonl", 1), ("a.jsonl", 3)]
    assert dropped.select("file", "line", "reason").rows() == [
        ("a.jsonl", 2, "not_json"), ("b.parquet", 1, "not_json"), ("b.parquet", 2, "duplicate"),
        ("b.parquet", 3, "duplicate")]
    assert dropped["detail"][1].startswith("messages: nested deeper than")


def test_the_loss_mask_of_a_long_chat_is_the_spans_of_its_answers(tmp_path):
    texts = [json.loads(line)["messages"][-1]["content"] for line in open(SHIPPED)] * 3
    base = train_tokenizer(texts, TokenizerConfig(vocab_size=1000, num_threads=1, hard_vocab_limit=False), tmp_path)
    from lm_assets.sft.chat import chat_tokenizer

    sp = load_tokenizer(chat_tokenizer(base.model)[0])
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"第{i}轮 turn {i}."} for i in range(2000)]
    ids, mask = encode_example(sp, messages)
    text, spans = render(messages)
    byte_spans = [(len(text[:a].encode()), len(text[:b].encode())) for a, b in spans]
    pieces = sp.encode(text, return_type="proto").pieces
    expected = [int(any(a <= p.begin and p.end <= b and p.end > p.begin for a, b in byte_spans)) for p in pieces]
    assert mask.tolist() == expected and sum(expected) > 1000


def test_the_loss_mask_covers_each_answer_and_its_end_marker_token_by_token(tmp_path):
    from lm_assets.sft.chat import chat_tokenizer

    texts = [json.loads(line)["messages"][-1]["content"] for line in open(SHIPPED)] * 3
    base = train_tokenizer(texts, TokenizerConfig(vocab_size=1000, num_threads=1, hard_vocab_limit=False), tmp_path)
    sp = load_tokenizer(chat_tokenizer(base.model)[0])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"},
                {"role": "assistant", "content": "4."}, {"role": "user", "content": "And 3 + 3?"},
                {"role": "assistant", "content": "6, 六."}]  # fmt: skip
    ids, mask = encode_example(sp, messages)
    assert sp.decode(ids.tolist()) == render(messages)[0]
    scored = [sp.id_to_piece(int(i)) for i in ids[mask == 1]]
    assert sp.decode(ids[mask == 1].tolist()) == "4." + END + "6, 六." + END
    assert all(marker not in scored for marker in MARKERS.values()) and scored.count(END) == 2
    assert all(sp.piece_to_id(p) != sp.unk_id() and len(sp.encode(p)) == 1 for p in (*MARKERS.values(), END))
    with pytest.raises(ValueError, match="chat marker"):
        encode_example(sp, [{"role": "user", "content": "say <|assistant|>"}, {"role": "assistant", "content": "no"}])


def test_fine_tuning_a_checkpoint_teaches_it_the_format(tmp_path):
    from transformers import AutoTokenizer

    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.generation import generate

    root, landing = tmp_path / "storage", tmp_path / "landing"
    store = Storage(str(root))
    shipped = [json.loads(line) for line in open(SHIPPED)]
    texts = ["\n".join(m["content"] for m in row["messages"]) for row in shipped]
    tok = train_tokenizer(texts * 3, TokenizerConfig(vocab_size=1200, num_threads=1, hard_vocab_limit=False), tmp_path / "tok")
    store.write_bytes("tokenizer/tokenizer.model", tok.model)
    (landing / "instructions").mkdir(parents=True)
    from lm_assets.corpus.decontam.contamination import load_mmlu

    question = load_mmlu("data/eval/mmlu.zip").filter(pl.col("split") == "test")["question"][5]
    ours = [shipped[0], {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "B"}]},
            {"messages": [{"role": "user", "content": "unanswered"}]}]  # fmt: skip
    (landing / "instructions" / "team.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ours))
    cfg = from_preset("tiny", tok.vocab_size, max_seq_len=256)
    export_hf(Transformer(cfg, seed=3).eval(), cfg, root / checkpoint_run_folder("main") / "step_00000001" / "hf",
              tokenizer_model_path=tok.path)  # fmt: skip
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [checkpoint_key("main", "step_00000001")])
    storage = StorageResource(root=str(root), s3=s3_resource_from_env())
    resources = {"storage": storage, "landing": LandingResource(root=str(landing), s3=s3_resource_from_env())}

    data = dg.materialize([instruction_data], instance=instance, resources=resources)
    meta = data.get_asset_materialization_events()[0].materialization.metadata
    assert meta["examples"].value == len(shipped) and meta["rows_read"].value == len(shipped) + 3
    dropped = store.read_parquet(INSTRUCTION_KEYS["dropped"])
    assert sorted(dropped["reason"]) == ["contamination:mmlu", "duplicate", "no_final_answer"]

    packed = dg.materialize([sft_dataset], instance=instance, resources={"storage": storage},
                            run_config={"ops": {"sft_dataset": {"config": {"seq_len": 257, "val_fraction": 0.1}}}})  # fmt: skip
    meta = packed.get_asset_materialization_events()[0].materialization.metadata
    assert meta["chat_pieces_added"].value == [*MARKERS.values(), END] and "⟦" in meta["example_as_scored"].value
    folder = root / SFT_KEYS["packed"]
    manifest = json.loads((folder / "manifest.json").read_text())
    sp = load_tokenizer(store.read_bytes(SFT_KEYS["tokenizer"]))
    rows = np.fromfile(folder / "train.bin", dtype=manifest["dtype"]).reshape(-1, 257)
    masks = np.fromfile(folder / "train_mask.bin", dtype=np.uint8).reshape(-1, 257)
    examples = store.read_parquet(INSTRUCTION_KEYS["examples"])
    by_id = dict(zip(examples["example_id"], examples["messages"]))
    placed = pl.read_parquet(folder / "train_examples.parquet")
    for r in placed.iter_rows(named=True):  # every token and mask bit where the packer put it
        ids, mask = encode_example(sp, by_id[r["example_id"]])
        at = slice(r["seq_offset"], r["seq_offset"] + r["length"])
        assert rows[r["seq_index"], at].tolist() == ids.tolist() and masks[r["seq_index"], at].tolist() == mask.tolist()
        assert rows[r["seq_index"], at.stop] == manifest["eos_id"] and masks[r["seq_index"], at.stop] == 0
    from lm_assets.training.data import PackedDataset

    x, y = PackedDataset(folder, "train").get_batch(0, 0, 1, 4)
    assert (y != -100).sum() == sum(int(masks[i, 1:].sum()) for i in PackedDataset(folder, "train").batch_indices(0, 0, 1, 4))

    launcher = TrainingLauncher(s3=s3_resource_from_env())
    run = dg.materialize([sft_run_and_checkpoint], instance=instance, resources={
        "storage": storage, "training_launcher": launcher, "pipes_subprocess_client": dg.PipesSubprocessClient()},
        run_config={"ops": {"sft_run": {"config": {"steps": 60, "lr": 3e-3, "micro_batch_size": 2, "warmup_steps": 5}}}})  # fmt: skip
    by_key = {m.asset_key.path[-1]: m.metadata for m in run.asset_materializations_for_node("sft_run")}
    assert by_key["sft_run"]["init_from"].value["vocab_rows_added"] == 4
    from tests.defs.test_training_asset import tensorboard_scalars

    losses = [v for _, v in tensorboard_scalars(by_key["sft_run"]["tensorboard_logdir"].value, "train/loss")]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])  # the loss on the answers falls
    assert checkpoint_key("sft", "step_00000060") in instance.get_dynamic_partitions(checkpoint_partitions.name)

    hf_dir = by_key["sft_checkpoint"]["hf_export"].value
    hf = AutoTokenizer.from_pretrained(hf_dir)
    messages = shipped[3]["messages"]
    chat_ids = hf.apply_chat_template(messages, tokenize=True)
    chat_ids = chat_ids["input_ids"] if hasattr(chat_ids, "keys") else chat_ids
    assert list(chat_ids) == encode_example(load_tokenizer(open(f"{hf_dir}/tokenizer.model", "rb").read()), messages)[0].tolist()
    em = load_model(hf_dir)
    prompt = em.encode(em.chat_prompt(messages[0]["content"]))
    assert em.tokenizer.decode(prompt) == hf.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    with torch.no_grad():
        out = generate(em.model, [prompt], 64, eos_id=em.stop_id)
    assert out.stopped_at_eos == [True] and out.tokens[0][-1] == em.tokenizer.piece_to_id(END)  # it answers, then ends its turn
    assert not any(em.tokenizer.id_to_piece(t) in MARKERS.values() for t in out.tokens[0])

    # The evaluation assets take the fine-tuned checkpoint as any other; its samples are asked as chat turns.
    from lm_assets.defs.evaluation.assets import checkpoint_samples
    from lm_assets.evaluation.samples import SAMPLE_PROMPTS
    from lm_assets.storage.layout import samples_key

    tuned = checkpoint_key("sft", "step_00000060")
    assert dg.materialize([checkpoint_samples], partition_key=tuned, instance=instance, resources={"storage": storage},
                          run_config={"ops": {"checkpoint_samples": {"config": {"max_new_tokens": 16, "device": "cpu"}}}}).success
    samples = store.read_parquet(samples_key(tuned))
    asked = [em.encode(em.chat_prompt(p)) for p in SAMPLE_PROMPTS]
    assert em.tokenizer.decode(asked[0]) == f"<|user|>\n{SAMPLE_PROMPTS[0]}<|end|>\n<|assistant|>\n"
    assert samples["greedy_ids"].to_list() == generate(em.model, asked, 16, eos_id=em.stop_id).tokens
