"""Every job tags its runs with its workload, and every workload the production instance limits is one a job sets."""

import functools
from pathlib import Path

import pytest
import yaml

from lm_assets.defs.common.jobs import MAX_RUNTIME_TAG, WORKLOAD_TAG
from lm_assets.definitions import defs

PRODUCTION = Path(__file__).resolve().parents[2] / "deploy" / "dagster-production.yaml"


@functools.cache
def jobs() -> dict:
    return {job.name: job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")}


def limited_stages() -> set[str]:
    limits = yaml.safe_load(PRODUCTION.read_text())["run_coordinator"]["config"]["tag_concurrency_limits"]
    return {limit["value"] for limit in limits if limit["key"] == WORKLOAD_TAG}


@pytest.mark.parametrize("name", sorted(jobs()))
def test_every_job_tags_its_runs_with_its_stage(name):
    assert jobs()[name].run_tags.get(WORKLOAD_TAG)


def test_every_job_bounds_its_runs_below_a_week_and_training_longest():
    runtimes = {name: int(job.run_tags[MAX_RUNTIME_TAG]) for name, job in jobs().items()}
    assert all(3600 <= seconds <= 7 * 24 * 3600 for seconds in runtimes.values()), runtimes
    assert runtimes["training_job"] == max(runtimes.values()) > runtimes["landed_shard_job"]


def test_every_limited_stage_is_set_by_some_job():
    workloads = limited_stages()
    assert workloads and all(isinstance(workload, str) for workload in workloads)
    set_by_jobs = {job.run_tags.get(WORKLOAD_TAG) for job in jobs().values()}
    assert workloads <= set_by_jobs, f"limited in {PRODUCTION.name} but set by no job: {sorted(workloads - set_by_jobs)}"


def test_one_training_run_at_a_time():
    limits = yaml.safe_load(PRODUCTION.read_text())["run_coordinator"]["config"]["tag_concurrency_limits"]
    assert {"key": WORKLOAD_TAG, "value": "training", "limit": 1} in limits
    assert jobs()["training_job"].run_tags[WORKLOAD_TAG] == "training"
