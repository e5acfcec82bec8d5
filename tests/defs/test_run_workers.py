"""A run whose worker process is killed stops holding a run slot: run_worker_sensor reports it failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES

from lm_assets.defs.run_workers import run_worker_sensor

WORKER = textwrap.dedent("""
    import sys, time
    import dagster as dg

    @dg.asset
    def slow_asset():
        time.sleep(300)

    dg.materialize([slow_asset], instance=dg.DagsterInstance.from_config(sys.argv[1]))
""")


def start_worker(home: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(home)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_started(instance: dg.DagsterInstance, count: int) -> list:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        if len(runs) >= count:
            return runs
        time.sleep(0.5)
    raise AssertionError("the worker's run never started")


def in_progress(instance: dg.DagsterInstance) -> int:
    return instance.get_runs_count(filters=dg.RunsFilter(statuses=IN_PROGRESS_RUN_STATUSES))


def test_a_killed_worker_is_failed_and_frees_its_slot_and_a_live_one_is_left_running(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml").read_text())
    instance = dg.DagsterInstance.from_config(str(home))
    doomed = start_worker(home)
    try:
        [run] = wait_started(instance, 1)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED  # what a kill leaves
        live = start_worker(home)
        try:
            started = wait_started(instance, 2)
            with dg.build_sensor_context(instance=instance) as context:
                result = run_worker_sensor(context)
            assert "1 run(s) with a dead worker marked failed" in result.skip_message
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
            alive = next(r for r in started if r.run_id != run.run_id)
            assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
            assert in_progress(instance) == 1  # the slot the killed run held is free
            failure = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
            assert "its run worker (process" in failure[0].event_log_entry.dagster_event.message
        finally:
            os.killpg(live.pid, signal.SIGKILL)
            live.wait()
    finally:
        if doomed.poll() is None:
            os.killpg(doomed.pid, signal.SIGKILL)
