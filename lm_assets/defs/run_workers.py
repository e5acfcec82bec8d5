"""Runs whose worker died end: a sensor that fails every started run whose worker process is gone.

The local run launcher cannot check a run worker's health, and a run started in a process of its own
(`dagster asset materialize`, `make demo`, a test) has no launcher at all: when that process is killed,
the run stays STARTED and holds a slot of the queued run coordinator until `dagster/max_runtime`. Every
run's worker records its process id in the run's RUN_START event. On an instance whose runs all start
on this machine (the default run launcher), a started run whose process is gone, or is a newer process
that reused the id, is reported failed, which frees its slot at the coordinator's next pass. A cluster's
run launcher (Kubernetes) checks its workers itself through run monitoring, so there the sensor does
nothing.

Runs of the implicit asset job carry no job tags, so run monitoring would bound them by the instance's
max_runtime_seconds; `run_limit_sensor` gives them their workload's tags instead."""

from __future__ import annotations

import dagster as dg
import psutil

from lm_assets.defs.common.jobs import MAX_RUNTIME_TAG, run_workload, workload_tags

WORKER_CHECK_INTERVAL_S = 60
RUN_LIMIT_INTERVAL_S = 30


def run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The process id and start time (epoch seconds) of the run's worker, from its RUN_START event."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    if not records or records[0].event_log_entry.dagster_event is None:
        return None
    entry = records[0].event_log_entry
    return entry.dagster_event.pid, entry.timestamp


def worker_alive(pid: int, started_at: float) -> bool:
    """Whether process `pid` is running and is the one that started the run (it began before the run did)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= started_at + 1
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Report every started run of this machine whose worker is gone as failed; returns their ids."""
    failed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        worker = run_worker_pid(instance, run.run_id)
        if worker is None or worker[0] is None or worker_alive(*worker):
            continue
        instance.report_run_failed(
            run, f"its run worker (process {worker[0]}) is gone: killed, or its machine restarted; marked failed "
            "by run_worker_sensor so that it stops holding a run slot",
        )
        failed.append(run.run_id)
    return failed


@dg.sensor(minimum_interval_seconds=WORKER_CHECK_INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Fails the started runs whose worker process died, within a minute, however they were started.")
def run_worker_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Fails the started runs whose worker process died, within a minute, however they were started."""
    if not isinstance(context.instance.run_launcher, dg.DefaultRunLauncher):
        return dg.SkipReason(f"{type(context.instance.run_launcher).__name__} checks its run workers (run monitoring)")
    failed = fail_dead_runs(context.instance)
    for run_id in failed:
        context.log.warning(f"run {run_id}: its worker is gone; marked failed")
    return dg.SkipReason(f"{len(failed)} run(s) with a dead worker marked failed" if failed else "every started run's worker is alive")


ACTIVE_STATUSES = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING,
                   dg.DagsterRunStatus.STARTED]  # fmt: skip


def tag_run_limits(instance: dg.DagsterInstance) -> dict[str, str]:
    """Give every unfinished run without a `dagster/max_runtime` tag its workload's tags (a queued run then
    also waits for its workload's concurrency limit); returns {run id: workload}."""
    tagged = {}
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=ACTIVE_STATUSES)):
        if MAX_RUNTIME_TAG in run.tags or not run.asset_selection:
            continue
        workload = run_workload(key.to_user_string() for key in run.asset_selection)
        if workload is None:
            continue
        tags = {k: v for k, v in workload_tags(workload).items() if k not in run.tags}
        instance.add_run_tags(run.run_id, tags)
        tagged[run.run_id] = workload
    return tagged


@dg.sensor(minimum_interval_seconds=RUN_LIMIT_INTERVAL_S, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Gives runs of the implicit asset job (dagster asset materialize, the UI's Materialize "
           "button) the maximum runtime and workload tag of the workload their assets belong to, as the named "
           "jobs' runs have them.")  # fmt: skip
def run_limit_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    tagged = tag_run_limits(context.instance)
    for run_id, workload in tagged.items():
        context.log.info(f"run {run_id}: tagged with the {workload} workload's limits")
    return dg.SkipReason(f"{len(tagged)} run(s) tagged with their workload's limits" if tagged
                         else "every unfinished asset run has a maximum runtime")  # fmt: skip


defs = dg.Definitions(sensors=[run_worker_sensor, run_limit_sensor])
