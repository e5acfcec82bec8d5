"""lm_assets.storage.layout: the keys every stage writes, checkpoint keys, and whole-shard accounting as stored."""

import json

import polars as pl
import pytest

from lm_assets.storage.keys import UnsafeKeyError
from lm_assets.storage.layout import (
    DOCUMENT_STAGES,
    checkpoint_key,
    checkpoint_run_folder,
    parse_checkpoint_key,
    raw_keys,
    shard_account,
    stage_keys,
)
from lm_assets.storage.store import Storage


def ids(n: int, prefix: str) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": [f"{prefix}{i}" for i in range(n)]})


def test_checkpoint_keys_round_trip_and_refuse_what_is_not_one():
    key = checkpoint_key("main", "step_00000040")
    assert key == "main-step_00000040" and parse_checkpoint_key(key) == ("main", "step_00000040")
    assert parse_checkpoint_key("run-2-step_00000001") == ("run-2", "step_00000001")
    assert checkpoint_run_folder("main") == "checkpoints/main"
    for bad in ("main", "main-step_40", "../x-step_00000040"):
        with pytest.raises(UnsafeKeyError):
            parse_checkpoint_key(bad)


def test_shard_account_adds_up_every_stage_as_stored(tmp_path):
    store = Storage(str(tmp_path))
    shard = "s.warc.gz"
    store.write_bytes(raw_keys(shard)["summary"], json.dumps({"records": 20}).encode())
    store.write_parquet(raw_keys(shard)["quarantine"], ids(1, "q"))
    dropped = {"raw": 3, "extracted": 2, "curated": 4, "deduplicated": 1, "decontaminated": 0}
    kept = 20 - 1
    for stage in DOCUMENT_STAGES:
        kept -= dropped[stage]
        store.write_parquet(stage_keys(stage, shard)["dropped"], ids(dropped[stage], stage))
        store.write_parquet(stage_keys(stage, shard)["documents"], ids(kept, stage))
    for through in DOCUMENT_STAGES[1:]:
        account = shard_account(store, shard, through=through)
        assert account["holds"] and account["unaccounted"] == 0, (through, account)
    # A document lost between stages breaks the account.
    store.write_parquet(stage_keys("deduplicated", shard)["documents"], ids(8, "x"))
    assert shard_account(store, shard, through="deduplicated")["unaccounted"] == 1
