"""What a round of dedup covers, decided from the index of earlier rounds (corpus/dedup/planning.py)."""

from lm_assets.corpus.dedup.planning import plan, plan_digest

AVAILABLE = {"a": "d1", "b": "d2", "c": "d3"}


def test_a_round_is_full_for_a_reason_else_incremental_over_new_shards():
    index = {"fingerprint": "f", "shards": {"a": "d1", "b": "d2"}}
    assert plan(index, AVAILABLE, "f", full_rebuild=False) == ("incremental", ["c"])
    assert plan(index, AVAILABLE, "f", full_rebuild=True) == ("full: requested", ["a", "b", "c"])
    assert plan(None, AVAILABLE, "f", full_rebuild=False) == ("full: no earlier index", ["a", "b", "c"])
    assert plan(index, AVAILABLE, "g", full_rebuild=False) == ("full: MinHash settings changed", ["a", "b", "c"])
    changed = {**AVAILABLE, "b": "other"}
    assert plan(index, changed, "f", full_rebuild=False) == ("full: sketches changed for b", ["a", "b", "c"])


def test_the_digest_follows_what_the_round_covers():
    digest = plan_digest(False, ["c"], AVAILABLE, "f")
    assert digest == plan_digest(False, ["c"], dict(AVAILABLE), "f") and len(digest) == 16
    assert digest != plan_digest(True, ["c"], AVAILABLE, "f") != plan_digest(False, ["c"], AVAILABLE, "g")
