"""preference_data as an asset: the shipped pairs and a team's files, every row accounted for."""

import json

import dagster as dg
import numpy as np
import polars as pl

from lm_assets.corpus.decontam.contamination import load_mmlu
from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, load_tokenizer, train_tokenizer
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.sft.assets import SHIPPED_PREFERENCES, preference_data, preference_dataset
from lm_assets.sft.chat import chat_tokenizer
from lm_assets.storage.layout import PREFERENCE_KEYS, samples_key
from lm_assets.storage.store import Storage


def test_shipped_and_team_pairs_are_validated_decontaminated_and_accounted_for(tmp_path):
    shipped = [json.loads(line) for line in open(SHIPPED_PREFERENCES, encoding="utf-8")]
    question = load_mmlu("data/eval/mmlu.zip").filter(pl.col("split") == "test")["question"][5]
    ours = [shipped[0], {"prompt": question, "chosen": "B, because the passage says so.", "rejected": "A."},
            {"prompt": "Say hi.", "chosen": "Hi!"}]
    (tmp_path / "landing" / "preferences").mkdir(parents=True)
    (tmp_path / "landing" / "preferences" / "team.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ours) + "\xff-not-json\n", encoding="latin-1")
    # two checkpoints' samples rated by people: prompt 0's decodings 4 and 1 (a pair), prompt 1's 3 and 2 (too close)
    store = Storage(str(tmp_path / "store"))
    store.write_parquet(samples_key("sft-step_00000002"), pl.DataFrame({
        "prompt": ["Name a colour.", "Count to three."], "greedy": ["Blue is a colour.", "One, two, three."],
        "sampled": ["xq zzv", "One two."]}))
    sheet = [{"sample_id": "sft-step_00000002/0/greedy", "rating": 5}, {"sample_id": "sft-step_00000002/0/greedy", "rating": 3},
             {"sample_id": "sft-step_00000002/0/sampled", "rating": 1}, {"sample_id": "sft-step_00000002/1/greedy", "rating": 3},
             {"sample_id": "sft-step_00000002/1/sampled", "rating": 2}]
    store.write_bytes("ratings/alice.jsonl", "".join(json.dumps(r) + "\n" for r in sheet).encode())
    resources = {"storage": StorageResource(root=str(tmp_path / "store"), s3=s3_resource_from_env()),
                 "landing": LandingResource(root=str(tmp_path / "landing"), s3=s3_resource_from_env())}
    result = dg.materialize([preference_data], instance=dg.DagsterInstance.ephemeral(), resources=resources)
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["pairs"].value == len(shipped) + 1 == 65
    assert meta["rows_read"].value == len(shipped) + 5 and meta["checked_against"].value == "mmlu"
    assert meta["by_language"].value == {"": 1, "en": 32, "zh": 32}
    assert meta["from_ratings"].value.startswith("1 pair(s) from 5 rated samples")
    rated = store.read_parquet(PREFERENCE_KEYS["pairs"]).filter(pl.col("file").str.contains("rated samples"))
    assert rated.select("chosen", "rejected").rows() == [("Blue is a colour.", "xq zzv")]
    dropped = store.read_parquet(PREFERENCE_KEYS["dropped"])
    assert dropped.filter(pl.col("file").str.ends_with("team.jsonl")).select("line", "reason").sort("line").rows() == [
        (1, "duplicate"), (2, "contamination:mmlu"), (3, "missing_side"), (4, "not_utf8")]
    assert store.read_parquet(PREFERENCE_KEYS["pairs"]).height == 65

    # preference_dataset: each pair one row, the chat format of sft_dataset, each answer's tokens marked
    texts = [json.dumps(r, ensure_ascii=False) for r in shipped]
    tok = train_tokenizer(texts * 4, TokenizerConfig(vocab_size=1200, num_threads=1, hard_vocab_limit=False), tmp_path / "tok")
    store.write_bytes("tokenizer/tokenizer.model", tok.model)
    packed = dg.materialize([preference_dataset], instance=dg.DagsterInstance.ephemeral(), resources={"storage": resources["storage"]},
                            run_config={"ops": {"preference_dataset": {"config": {"seq_len": 160, "val_fraction": 0.25}}}})
    meta = packed.get_asset_materialization_events()[0].materialization.metadata
    assert sum(meta["pairs"].value.values()) + meta["too_long"].value == 65 and meta["pairs"].value["val"] > 0
    folder = store.local_path(PREFERENCE_KEYS["packed"])
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = np.fromfile(folder / "train.bin", dtype=manifest["dtype"]).reshape(-1, 160)
    sides = np.fromfile(folder / "train_sides.bin", dtype=np.uint8).reshape(-1, 160)
    placed = pl.read_parquet(folder / "train_pairs.parquet")
    pairs = store.read_parquet(PREFERENCE_KEYS["pairs"])
    sp = load_tokenizer(chat_tokenizer(tok.model)[0])
    for i in range(3):
        chosen = pairs.filter(pl.col("pair_id") == placed["pair_id"][i])["chosen"][0]
        assert sp.decode(rows[i][sides[i] == 1].tolist()).strip() == chosen + "<|end|>"
        assert (sides[i] == 2).sum() > 0 and rows[i][placed["chosen_length"][i]] == manifest["eos_id"]


def test_a_rating_sheet_line_naming_a_path_outside_the_store_is_a_rating_problem(tmp_path):
    store = Storage(str(tmp_path / "store"))
    store.write_parquet(samples_key("sft-step_00000002"), pl.DataFrame({
        "prompt": ["Name a colour."], "greedy": ["Blue is a colour."], "sampled": ["xq zzv"]}))
    sheet = [{"sample_id": "sft-step_00000002/0/greedy", "rating": 5},
             {"sample_id": "../../../etc/0/greedy", "rating": 1},
             {"sample_id": "sft-step_00000002/0/sampled", "rating": 1}]
    store.write_bytes("ratings/bob.jsonl", "".join(json.dumps(r) + "\n" for r in sheet).encode())
    resources = {"storage": StorageResource(root=str(tmp_path / "store"), s3=s3_resource_from_env()),
                 "landing": LandingResource(root=str(tmp_path / "landing"), s3=s3_resource_from_env())}
    result = dg.materialize([preference_data], instance=dg.DagsterInstance.ephemeral(), resources=resources,
                            run_config={"ops": {"preference_data": {"config": {"mmlu_path": ""}}}})
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["from_ratings"].value.startswith("1 pair(s) from 2 rated samples")
    assert meta["rating_problems"].value == 1
    shown = meta["rating_problem_lines"].value
    assert "ratings/bob.jsonl" in shown and "| 2 |" in shown and "'../../../etc/0/greedy'" in shown
