"""The asset catalog: owners, tags and code versions on every asset, and a named job for each."""

import importlib
import sys

import dagster as dg

from lm_assets.defs.common.catalog import source_version
from lm_assets.definitions import defs


def specs() -> dict[str, dg.AssetSpec]:
    return {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}


def test_every_asset_has_an_owner_tags_and_a_code_version():
    for name, spec in specs().items():
        assert spec.owners and all(owner.startswith("team:") for owner in spec.owners), name
        assert spec.tags["domain"] == spec.group_name, name
        assert spec.tags["partitioned_by"] in ("shards", "dedup_bands", "checkpoints", "none"), name
        assert spec.code_version and len(spec.code_version) == 12, name
    assert specs()["curated_shard"].tags["partitioned_by"] == "shards"
    assert specs()["dedup_edges"].tags["partitioned_by"] == "dedup_bands"
    assert specs()["mmlu_score"].owners == ["team:evaluation"]


def test_a_code_version_follows_the_source_of_the_code_that_does_the_work(tmp_path, monkeypatch):
    module_file = tmp_path / "stage_logic.py"
    module_file.write_text("THRESHOLD = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("stage_logic")
    try:
        before = source_version(module)
        assert source_version(module) == before
        module_file.write_text("THRESHOLD = 2\n")
        assert source_version(module) != before
    finally:
        sys.modules.pop("stage_logic", None)


def test_every_asset_can_be_launched_under_a_job_name():
    """The UI names a run after its job when it is launched from the job's page; every asset has one."""
    in_jobs = {
        key.to_user_string()
        for job in defs.resolve_all_job_defs()
        if not job.name.startswith("__")
        for key in job.asset_layer.executable_asset_keys
    }
    assert set(specs()) <= in_jobs, sorted(set(specs()) - in_jobs)
