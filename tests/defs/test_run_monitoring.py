"""A run whose process is SIGKILLed does not stay STARTED, on the local instance (deploy/dagster.yaml)
or the production one (deploy/dagster-production.yaml).

Each test builds a real instance from the deploy config in a temporary DAGSTER_HOME; the job sleeps.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import kubernetes
import pytest
import yaml
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import EmptyWorkspaceTarget, PythonFileTarget
from dagster._daemon.controller import create_daemons_from_instance
from dagster._daemon.daemon import MonitoringDaemon
from dagster._daemon.monitoring import run_monitoring

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120


@dg.op
def nap():
    time.sleep(600)


@dg.job(executor_def=dg.in_process_executor)
def sleepy():
    nap()


defs = dg.Definitions(jobs=[sleepy])


@pytest.fixture
def instance(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        yield instance


def wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S} s"
        time.sleep(0.2)
    return value


def run_status(instance, run_id: str) -> dg.DagsterRunStatus:
    return instance.get_run_by_id(run_id).status


def messages(instance, run_id: str) -> list[str]:
    return [record.dagster_event.message or "" for record in instance.all_logs(run_id) if record.is_dagster_event]


def run_process_id(instance, run_id: str) -> int | None:
    for message in messages(instance, run_id):
        if match := re.match(r"Started process for run \(pid: (\d+)\)", message):
            return int(match.group(1))
    return None


def run_monitoring_iteration(instance, config_name: str) -> None:
    """One pass of the monitoring daemon, found the way `dagster-daemon run` finds it."""
    monitor = next((d for d in create_daemons_from_instance(instance) if isinstance(d, MonitoringDaemon)), None)
    assert monitor is not None, f"run monitoring is off in deploy/{config_name}: the run would stay STARTED"
    with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as context:
        errors = [error for error in monitor.run_iteration(context) if error is not None]
    assert not errors


def test_a_killed_in_process_run_is_failed_by_run_monitoring(instance, monkeypatch):
    # `make demo`'s way: the run executes in the process that started it, and nothing else watches it.
    script = (
        "import dagster as dg; from tests.defs.test_run_monitoring import sleepy; "
        "sleepy.execute_in_process(instance=dg.DagsterInstance.get())"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=os.environ.copy())
    try:
        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        run = wait_for(lambda: next(iter(instance.get_runs(started)), None), "started run")
    finally:
        worker.kill()
        worker.wait()
    assert run_status(instance, run.run_id) == dg.DagsterRunStatus.STARTED

    # The local launcher cannot check a worker's health: max_runtime_seconds is what ends a dead run.
    later = time.time() + instance.run_monitoring_max_runtime_seconds + 1
    monkeypatch.setattr(run_monitoring, "get_current_timestamp", lambda: later)
    run_monitoring_iteration(instance, "dagster.yaml")

    assert run_status(instance, run.run_id) == dg.DagsterRunStatus.FAILURE
    assert any("exceeding maximum runtime" in m for m in messages(instance, run.run_id))


def test_a_killed_run_of_the_local_launcher_is_failed_by_its_code_server(stops_started_processes, instance):
    # `make ui`'s way: the run launcher starts the run in a child of the code server, which
    # notices the child's death without run monitoring.
    target = PythonFileTarget(__file__, attribute="defs", working_directory=str(ROOT), location_name="sleepy")
    with WorkspaceProcessContext(instance, target) as context:
        workspace = context.create_request_context()
        job = workspace.get_code_location("sleepy").get_repository("__repository__").get_full_job("sleepy")
        run = instance.create_run_for_job(
            sleepy, remote_job_origin=job.get_remote_origin(), job_code_origin=job.get_python_origin()
        )
        instance.launch_run(run.run_id, workspace)
        os.kill(wait_for(lambda: run_process_id(instance, run.run_id), "run process"), signal.SIGKILL)
        wait_for(lambda: instance.get_run_by_id(run.run_id).is_finished, "finished run")

    assert run_status(instance, run.run_id) == dg.DagsterRunStatus.FAILURE
    assert any("was terminated by signal 9 (SIGKILL)" in m for m in messages(instance, run.run_id))


class DeadJobClient:
    """Kubernetes as the K8sRunLauncher sees it once a run worker's pod was killed: its Job failed."""

    def get_job_status(self, namespace, job_name):
        from kubernetes.client import V1JobStatus

        return V1JobStatus(active=None, failed=1, succeeded=None)

    def get_pod_names_in_job(self, job_name, namespace):
        return []

    def get_job_debug_info(self, job_name, namespace):
        return f"Job {job_name}: BackoffLimitExceeded"


def test_a_run_whose_kubernetes_job_died_is_failed_by_production_run_monitoring(tmp_path, monkeypatch):
    # The production config with SQLite in place of Postgres and no S3 compute logs; the rest as deployed.
    config = yaml.safe_load((ROOT / "deploy" / "dagster-production.yaml").read_text())
    config["storage"] = {"sqlite": {"base_dir": str(tmp_path)}}
    del config["compute_logs"]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("LM_ASSETS_K8S_NAMESPACE", "lm-assets")
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)

    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_launcher).__name__ == "K8sRunLauncher"
        monkeypatch.setattr(instance.run_launcher, "_api_client", DeadJobClient())
        run = instance.create_run_for_job(sleepy, status=dg.DagsterRunStatus.STARTED)

        run_monitoring_iteration(instance, "dagster-production.yaml")

        assert run_status(instance, run.run_id) == dg.DagsterRunStatus.FAILURE
        assert any("Detected run worker status FAILED" in m for m in messages(instance, run.run_id))


def test_runs_of_the_implicit_asset_job_get_their_stages_limits(instance):
    # `dagster asset materialize`, `lm-assets materialize` and the UI's Materialize button run the implicit
    # asset job, which carries no job tags: run monitoring would give a training run one day, not seven.
    from lm_assets.definitions import defs
    from lm_assets.defs.common.jobs import ASSET_WORKLOADS, MAX_RUNTIME_S
    from lm_assets.defs.run_workers import tag_run_limits

    assert {node.key.to_user_string() for node in defs.resolve_asset_graph().asset_nodes} == set(ASSET_WORKLOADS)
    job = defs.resolve_implicit_global_asset_job_def()
    keys = [dg.AssetKey(name) for name in ("training_run", "checkpoint", "raw_shard")]
    training = instance.create_run_for_job(job, asset_selection=frozenset(keys))
    curation = instance.create_run_for_job(job, asset_selection=frozenset(keys[2:]), tags={"lm-assets/workload": "mine"})
    named = instance.create_run_for_job(job, asset_selection=frozenset(keys[2:]), tags={"dagster/max_runtime": "60"})
    assert tag_run_limits(instance) == {training.run_id: "training", curation.run_id: "curation"}
    tags = {run.run_id: instance.get_run_by_id(run.run_id).tags for run in (training, curation, named)}
    assert tags[training.run_id] == {"dagster/max_runtime": str(MAX_RUNTIME_S["training"]), "lm-assets/workload": "training"}
    assert tags[curation.run_id] == {"dagster/max_runtime": str(8 * 3600), "lm-assets/workload": "mine"}
    assert tags[named.run_id] == {"dagster/max_runtime": "60"}
    assert tag_run_limits(instance) == {}
