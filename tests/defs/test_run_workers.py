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

ROOT = Path(__file__).resolve().parents[2]


@dg.op
def hello():
    return 1


@dg.job(executor_def=dg.in_process_executor)
def quick():
    hello()


defs = dg.Definitions(jobs=[quick])  # served by a code server in the queued-run test

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


def local_instance(tmp_path: Path, max_concurrent_runs: int | None = None) -> tuple[Path, dg.DagsterInstance]:
    """A DAGSTER_HOME holding deploy/dagster.yaml (its concurrency limit changed when given), and its instance."""
    import yaml

    config = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    if max_concurrent_runs is not None:
        config["run_coordinator"]["config"]["max_concurrent_runs"] = max_concurrent_runs
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home, dg.DagsterInstance.from_config(str(home))


def test_a_killed_worker_is_failed_and_frees_its_slot_and_a_live_one_is_left_running(tmp_path):
    home, instance = local_instance(tmp_path)
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


def test_a_queued_run_launches_once_the_killed_run_holding_the_only_slot_is_failed(stops_started_processes, tmp_path):
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import PythonFileTarget
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    home, instance = local_instance(tmp_path, max_concurrent_runs=1)
    doomed = start_worker(home)
    try:
        [zombie] = wait_started(instance, 1)
    finally:
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
    target = PythonFileTarget(__file__, attribute="defs", working_directory=str(ROOT), location_name="quick")
    with WorkspaceProcessContext(instance, target) as workspace:
        request = workspace.create_request_context()
        remote = request.get_code_location("quick").get_repository("__repository__").get_full_job("quick")
        run = instance.create_run_for_job(quick, remote_job_origin=remote.get_remote_origin(),
                                          job_code_origin=remote.get_python_origin())
        instance.submit_run(run.run_id, request)
        coordinator = QueuedRunCoordinatorDaemon(interval_seconds=1)
        list(coordinator.run_iteration(workspace))
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.QUEUED  # the dead run holds the slot
        with dg.build_sensor_context(instance=instance) as context:
            run_worker_sensor(context)
        assert instance.get_run_by_id(zombie.run_id).status == dg.DagsterRunStatus.FAILURE
        list(coordinator.run_iteration(workspace))
        deadline = time.monotonic() + 120
        while not instance.get_run_by_id(run.run_id).is_finished and time.monotonic() < deadline:
            time.sleep(0.5)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS
