"""preference_data as an asset: the shipped pairs and a team's files, every row accounted for."""

import json

import dagster as dg
import polars as pl

from lm_assets.corpus.decontam.contamination import load_mmlu
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.sft.assets import SHIPPED_PREFERENCES, preference_data
from lm_assets.storage.layout import PREFERENCE_KEYS
from lm_assets.storage.store import Storage


def test_shipped_and_team_pairs_are_validated_decontaminated_and_accounted_for(tmp_path):
    shipped = [json.loads(line) for line in open(SHIPPED_PREFERENCES, encoding="utf-8")]
    question = load_mmlu("data/eval/mmlu.zip").filter(pl.col("split") == "test")["question"][5]
    ours = [shipped[0], {"prompt": question, "chosen": "B, because the passage says so.", "rejected": "A."},
            {"prompt": "Say hi.", "chosen": "Hi!"}]
    (tmp_path / "landing" / "preferences").mkdir(parents=True)
    (tmp_path / "landing" / "preferences" / "team.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ours) + "\xff-not-json\n", encoding="latin-1")
    resources = {"storage": StorageResource(root=str(tmp_path / "store"), s3=s3_resource_from_env()),
                 "landing": LandingResource(root=str(tmp_path / "landing"), s3=s3_resource_from_env())}
    result = dg.materialize([preference_data], instance=dg.DagsterInstance.ephemeral(), resources=resources)
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["pairs"].value == len(shipped) == 32
    assert meta["rows_read"].value == len(shipped) + 4 and meta["checked_against"].value == "mmlu"
    assert meta["by_language"].value == {"en": 16, "zh": 16}
    store = Storage(str(tmp_path / "store"))
    dropped = store.read_parquet(PREFERENCE_KEYS["dropped"])
    assert dropped.filter(pl.col("file").str.ends_with("team.jsonl")).select("line", "reason").sort("line").rows() == [
        (1, "duplicate"), (2, "contamination:mmlu"), (3, "missing_side"), (4, "not_utf8")]
    assert store.read_parquet(PREFERENCE_KEYS["pairs"]).height == 32
