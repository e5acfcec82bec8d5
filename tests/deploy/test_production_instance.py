"""deploy/dagster-production.yaml on a real PostgreSQL server, with only its Kubernetes run launcher
swapped for the default one: the landing sensor's daemon tick registers shards and queues a run, the
queued run coordinator's daemon launches it through a real code server, and it runs to the end; then
a backfill, the evaluation sensor, run monitoring and run_worker_sensor, all on that storage."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lm_assets.app.postgres import instance_config, server
from lm_assets.app.process_tree import alive, cmdline, descendants, stop_tree
from tests.support.warc_builder import WarcBuilder, page

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "deploy" / "dagster-production.yaml"
PROSE = ("The harbour pilots guide each ship through the narrow channel at dawn, and the keepers of the "
         "lighthouse write down every vessel that passes, its cargo and its port of call. ") * 6


@pytest.fixture(scope="module")
def postgres():
    # Not under pytest's own temporary root: it is private to root (0700), and pytest resets it so, while
    # the server runs as a user of its own when the tests run as root.
    with tempfile.TemporaryDirectory(prefix="lm-assets-postgres-") as folder, server(Path(folder)) as running:
        yield running


@pytest.fixture
def production_instance(tmp_path, postgres, s3_server, monkeypatch):
    """DAGSTER_HOME holding the production instance config (the default run launcher in place of
    Kubernetes'), its environment pointing at the loopback PostgreSQL server and S3 bucket."""
    config = instance_config()
    assert {key: value for key, value in config.items() if key != "run_launcher"} == {
        key: value for key, value in yaml.safe_load(PRODUCTION.read_text()).items() if key != "run_launcher"}
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    landing = tmp_path / "landing"
    landing.mkdir()
    for number in range(3):
        builder = WarcBuilder().warcinfo()
        for i in range(3):
            builder.response(f"https://s{number}.example/{i}", page(f"Page {i}", f"<p>{PROSE}</p><p>Shard {number}, page {i}.</p>"))
        builder.write(landing / f"shard-{number}.warc.gz")
        (landing / f"shard-{number}.warc.gz.done").write_text("")  # complete: the sensor need not wait
    environment = {
        "DAGSTER_HOME": str(home), **postgres.environment(postgres.new_database()),
        "LM_ASSETS_LOG_BUCKET": s3_server.bucket, "AWS_ENDPOINT_URL": s3_server.endpoint, "LM_ASSETS_K8S_NAMESPACE": "unused",
        "LM_ASSETS_LANDING_ROOT": str(landing), "LM_ASSETS_STORAGE_ROOT": str(tmp_path / "storage"),
        "LM_ASSETS_TOXICITY_BACKEND": "profanity_check",
    }  # fmt: skip
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    with dg.DagsterInstance.get() as instance:
        yield instance


@contextmanager
def code_server_workspace(instance: dg.DagsterInstance):
    """The code location served by a real gRPC code server process, as the daemon and webserver load it.
    Closing the workspace asks the server to shut down and does not wait: the server is stopped here,
    or it outlives the tests."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    target = ModuleTarget(module_name="lm_assets.definitions", attribute="defs", working_directory=str(REPO),
                          location_name="lm_assets")
    before = descendants(os.getpid())
    with WorkspaceProcessContext(instance, target) as workspace:
        servers = {pid for pid in descendants(os.getpid()) - before if "api grpc" in cmdline(pid)}
        assert servers, "no code server process"
        yield workspace
    for pid in servers:
        stop_tree(pid, grace_s=10)
    assert not [pid for pid in servers if alive(pid)]


def daemon_tick(workspace, *sensor_names: str) -> None:
    from dagster._daemon.sensor import execute_sensor_iteration

    location = workspace.create_request_context().get_code_location("lm_assets")
    repository = next(iter(location.get_repositories().values()))
    for name in sensor_names:
        workspace.instance.start_sensor(repository.get_sensor(name))
    list(execute_sensor_iteration(workspace, logging.getLogger("tests.sensor_daemon"), None, None))


def wait_for(instance: dg.DagsterInstance, run_id: str, timeout_s: float = 300) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run.is_finished:
            return run
        time.sleep(1)
    raise AssertionError(f"run {run_id} did not finish in {timeout_s} s: {instance.get_run_by_id(run_id).status}")


def test_the_production_instance_runs_sensors_queued_runs_and_backfills_on_postgres(production_instance):
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id
    from dagster._daemon.backfill import execute_backfill_iteration
    from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from lm_assets.defs.run_workers import run_worker_sensor

    instance = production_instance
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
    assert type(instance.compute_log_manager).__name__ == "S3ComputeLogManager"
    limits = instance.run_coordinator.get_run_queue_config().tag_concurrency_limits
    assert {"key": "lm-assets/workload", "value": "training", "limit": 1} in limits
    assert instance.run_monitoring_enabled
    from lm_assets.app.cli import main as lm_assets

    assert lm_assets(["check-instance", "--postgres"]) == 0  # what ui-postgres checks before it starts

    with code_server_workspace(instance) as workspace:
        daemon_tick(workspace, "landing_sensor")
        shards = instance.get_dynamic_partitions("shards")
        assert shards == ["shard-0.warc.gz", "shard-1.warc.gz", "shard-2.warc.gz"]
        [queued] = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
        assert (queued.tags["dagster/asset_partition_range_start"], queued.tags["dagster/asset_partition_range_end"]) == (
            shards[0], shards[-1])
        assert queued.tags["lm-assets/workload"] == "curation" and queued.tags["dagster/max_runtime"] == str(8 * 3600)

        list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(workspace))
        finished = wait_for(instance, queued.run_id)
        assert finished.status == dg.DagsterRunStatus.SUCCESS
        for asset in ("raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == set(shards), asset

        with dg.build_sensor_context(instance=instance) as context:
            assert run_worker_sensor(context).skip_message == "every started run's worker is alive"
        list(execute_run_monitoring_iteration(workspace, logging.getLogger("tests.monitoring")))

        asset_graph = workspace.create_request_context().asset_graph
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id=make_new_backfill_id(), asset_graph=asset_graph, partition_names=None,
            asset_selection=[dg.AssetKey("curated_shard"), dg.AssetKey("minhash_signatures")],
            backfill_timestamp=time.time(), tags={}, dynamic_partitions_store=instance, all_partitions=True,
            title=None, description=None, run_config=None,
        )
        instance.add_backfill(backfill)
        list(execute_backfill_iteration(workspace, logging.getLogger("tests.backfill")))
        backfill_runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
        assert len(backfill_runs) == 1 and backfill_runs[0].status == dg.DagsterRunStatus.QUEUED

        instance.add_dynamic_partitions("checkpoints", ["demo-step_00000002"])
        daemon_tick(workspace, "checkpoint_evaluation_sensor")
        evaluation = instance.get_runs(filters=dg.RunsFilter(tags={"lm-assets/workload": "evaluation"}))
        assert [run.tags["dagster/partition"] for run in evaluation] == ["demo-step_00000002"]
