"""Materialize the asset graph in its topological order: every shard's curation, dedup across shards,
tokens, training and evaluation.

Each run executes in this process (the benchmarks and tests), or, as `make demo` runs them, is launched
by the instance's run launcher against the code location workspace.yaml declares (`LaunchedRuns`), so
that it is a run of that location's job like one the UI launches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import dagster as dg

from lm_assets.corpus.ingest.readers import landing_shards
from lm_assets.defs.common.environment import project_dir
from lm_assets.defs.common.partitions import add_new_partitions, checkpoint_partitions, shard_partitions
from lm_assets.defs.common.sample_defaults import SAMPLE_PROFILE, demo_run_config
from lm_assets.defs.evaluation.assets import checkpoint_evaluation_sensor

# The sample profile's offline toxicity model (Detoxify would download its release model), as the
# `toxicity` resource's run config.
OFFLINE_TOXICITY = {"toxicity": {"config": SAMPLE_PROFILE["toxicity"]}}
# For runs without quality labels (benchmarks of speed and dedup, tests): the rules alone decide.
OFFLINE_RUN_CONFIG = {"resources": OFFLINE_TOXICITY, "ops": {"curated_shard": {"config": {"quality_policy": "rules"}}}}
# `make demo`'s run config: the sample crawl's profile and what the demo runs besides (sample_defaults.py).
# The demo trains the quality classifier on the sample crawl's labels: the default policy applies.
DEMO_RUN_CONFIG = demo_run_config()


def run_shard_graph(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    shards: list[str],
    run_config: dict | None = None,
    through_packing: bool = False,
    through_training: bool = False,
    train_classifier: bool = False,
    progress: Callable[[str], None] = lambda message: None,
    finished: Callable[[str, dg.ExecuteInProcessResult, float], None] = lambda what, result, seconds: None,
    execute: Callable | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Materialize the asset graph in its topological order, one run of a named job per partition:
    through `decontaminated_shard`, or with `through_packing` `packed_dataset`, or with `through_training`
    every evaluation of every checkpoint. With `train_classifier`, the quality classifier is trained on
    the labels between extraction and curation; without, `quality_labels` and `quality_classifier` are
    left out. `progress` hears of each run before it starts, `finished` after it ends (what ran, its
    result, seconds). `execute(job, partition_key, run_config)` runs one (default: in this process;
    `LaunchedRuns.execute`: launched on the code location). Stops at the first failed run, which is
    returned last."""
    add_new_partitions(instance, shard_partitions, shards)
    target = None if through_training else "packed_dataset" if through_packing else "decontaminated_shard"
    skipped = (() if train_classifier else QUALITY_ASSETS) + LAST_ASSETS
    steps = expand_partitions(graph_steps(defs, target, skipped, shards), instance)  # known as the runs go
    if through_training:
        steps = chain(steps, last_steps(defs, instance))
    results = []
    for job, keys, assets in steps:
        what = assets + (f" for {keys}" if keys else "")
        progress(f"materializing {what}")
        started = time.perf_counter()
        if execute is None:
            result = job.execute_in_process(
                partition_key=keys, instance=instance, run_config=run_config_for(run_config, job), raise_on_error=False
            )
        else:
            result = execute(job, keys, run_config_for(run_config, job))
        finished(what, result, time.perf_counter() - started)
        results.append(result)
        if not result.success:
            break
    return results


# The assets that train the quality classifier on labels: left out when curation runs without them.
QUALITY_ASSETS = ("quality_labels", "quality_classifier")
# Run once the graph has run, for the newest checkpoint (the aligned one): its compressed variants and its model card.
LAST_ASSETS = ("compressed_checkpoint", "model_card")


def last_steps(defs: dg.Definitions, instance: dg.DagsterInstance):
    """After the graph: the evaluation of checkpoints made after the evaluation ran (DPO's, which depends on
    people's ratings of evaluated samples, so that it cannot come before them in the graph), as
    `checkpoint_evaluation_sensor` asks; then the newest checkpoint's compressed variants, and its model card."""
    evaluation = defs.resolve_job_def("evaluation_job")
    for checkpoint in checkpoints_to_evaluate(instance):
        yield evaluation, checkpoint, "evaluation_job"
    newest = instance.get_dynamic_partitions(checkpoint_partitions.name)[-1]
    yield defs.resolve_job_def("compression_job"), newest, "compressed_checkpoint"
    yield defs.resolve_job_def("model_card_job"), newest, "model_card"


def topological_assets(graph, keys: set) -> list:
    """`keys` in an order where every asset comes after the assets it depends on; among those ready, one
    made by the same op as the asset before it comes first, then one with its partitions and group, then one
    with its partitions (so that one job can run them together), then the first by name."""
    order, placed = [], set()
    defined = sorted(keys)
    while len(order) < len(defined):
        ready = [key for key in defined if key not in placed and graph.get(key).parent_keys & keys <= placed]
        previous = graph.get(order[-1]).partitions_def if order else None
        same = [key for key in ready if order and graph.get(key).partitions_def == previous]
        # The other assets of the same multi-asset first: one op makes them, so one run must.
        siblings = [key for key in same if graph.get(key).assets_def is graph.get(order[-1]).assets_def]
        group = [key for key in same if graph.get(key).group_name == graph.get(order[-1]).group_name]
        key = (siblings or group or same or ready)[0]
        order.append(key)
        placed.add(key)
    return order


def graph_steps(defs: dg.Definitions, target: str | None, skipped: tuple[str, ...], shards: list[str]) -> list:
    """`(job, partition key, EVERY_CHECKPOINT, EveryRegistered or None, what)` for every run that materializes `target`
    and what it depends on (None: the whole graph), but `skipped`, in topological order; each run is a
    named job whose assets are the next ones in that order, the longest such job first."""
    graph = defs.resolve_asset_graph()
    if target is None:
        keys = set(graph.get_all_asset_keys())
    else:
        keys = {dg.AssetKey(target), *graph.upstream_key_iterator(dg.AssetKey(target))}
    keys -= {dg.AssetKey(name) for name in skipped}
    order = topological_assets(graph, keys)
    jobs = [job for job in defs.resolve_all_job_defs() if not job.name.startswith("__")]
    selections = {job.name: set(job.asset_layer.executable_asset_keys) for job in jobs}
    steps, at = [], 0
    while at < len(order):
        fits = [job for job in jobs if selections[job.name] == set(order[at : at + len(selections[job.name])])]
        if not fits:
            raise ValueError(f"no job materializes {order[at].to_user_string()} with the assets after it")
        job = max(fits, key=lambda j: len(selections[j.name]))
        assets = order[at : at + len(selections[job.name])]
        at += len(assets)
        steps += [(job, key, describe(graph, assets)) for key in partition_keys(graph.get(assets[0]).partitions_def, shards)]
    return steps


def partition_keys(partitions_def, shards: list[str]) -> list:
    if partitions_def is None:
        return [None]
    if partitions_def == shard_partitions:
        return list(shards)
    if partitions_def == checkpoint_partitions:
        return [EVERY_CHECKPOINT]
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return [EveryRegistered(partitions_def.name)]
    return partitions_def.get_partition_keys()


def describe(graph, assets: list) -> str:
    """The assets of one run, joined by → where each reads the one before it, else by commas."""
    text = assets[0].to_user_string()
    for before, key in zip(assets, assets[1:]):
        text += (" → " if before in graph.get(key).parent_keys else ", ") + key.to_user_string()
    return text


EVERY_CHECKPOINT = object()


@dataclass(frozen=True)
class EveryRegistered:
    """Every partition of the dynamic partitions `name` registered when the step is reached (dedup's band
    ranges, which minhash_signatures registers from the dedup resource's settings)."""

    name: str


def expand_partitions(steps: list, instance: dg.DagsterInstance):
    """The steps, with one per partition in place of EVERY_CHECKPOINT (the checkpoints to evaluate, known
    once training ran) and of `EveryRegistered` (known once the assets before it ran)."""
    for job, key, what in steps:
        if key is EVERY_CHECKPOINT:
            for checkpoint in checkpoints_to_evaluate(instance):
                yield job, checkpoint, what
        elif isinstance(key, EveryRegistered):
            for partition in instance.get_dynamic_partitions(key.name):
                yield job, partition, what
        else:
            yield job, key, what


def checkpoints_to_evaluate(instance: dg.DagsterInstance) -> list[str]:
    """What `checkpoint_evaluation_sensor` requests on a tick now, run in process: every checkpoint
    partition that some evaluation asset has not been materialized for. The demo evaluates through
    it, as the sensor would when switched on (running the whole job for each)."""
    result = checkpoint_evaluation_sensor(dg.build_sensor_context(instance=instance))
    return [request.partition_key for request in result.run_requests or []]


def run_config_for(run_config: dict | None, job: dg.JobDefinition) -> dict | None:
    """The part of a graph-wide run config (`{"ops": {asset: ...}, "resources": ...}`) that a job's ops take,
    with its resources' settings."""
    if not run_config:
        return None
    ops = {name: cfg for name, cfg in run_config.get("ops", {}).items() if job.graph.has_node_named(name)}
    resources = run_config.get("resources", {})
    return {**({"ops": ops} if ops else {}), **({"resources": resources} if resources else {})} or None


# The code location and repository workspace.yaml declares.
LOCATION, REPOSITORY = "lm_assets", "__repository__"


@dataclass
class LaunchedRun:
    """A run launched on the code location, once it has ended: what `finished` reads of a result."""

    instance: dg.DagsterInstance
    run_id: str

    @property
    def success(self) -> bool:
        return self.instance.get_run_by_id(self.run_id).status == dg.DagsterRunStatus.SUCCESS

    def get_asset_materialization_events(self) -> list:
        records = self.instance.get_records_for_run(self.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        return [record.event_log_entry.dagster_event for record in records.records]


class LaunchedRuns:
    """Runs of the code location workspace.yaml declares, served by a code server of their own and
    launched by the instance's run launcher, each waited for: runs like those the UI and the daemon
    launch, which show on their job's page and the timeline and can be re-executed."""

    def __init__(self, instance: dg.DagsterInstance, poll_s: float = 0.25):
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import ModuleTarget

        self.instance, self.poll_s = instance, poll_s
        target = ModuleTarget(module_name="lm_assets.definitions", attribute="defs",
                              working_directory=str(project_dir()), location_name=LOCATION)
        self._workspace = WorkspaceProcessContext(instance, target)

    def __enter__(self) -> LaunchedRuns:
        self._workspace.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._workspace.__exit__(*exc)

    def execute(self, job: dg.JobDefinition, partition_key: str | None, run_config: dict | None) -> LaunchedRun:
        request = self._workspace.create_request_context()
        remote = request.get_code_location(LOCATION).get_repository(REPOSITORY).get_full_job(job.name)
        tags = {**job.run_tags, **(job.get_tags_for_partition_key(partition_key, selected_asset_keys=None) if partition_key else {})}
        run = self.instance.create_run_for_job(
            job, run_config=run_config, tags=tags,
            remote_job_origin=remote.get_remote_origin(), job_code_origin=remote.get_python_origin(),
        )
        self.instance.launch_run(run.run_id, request)
        while not self.instance.get_run_by_id(run.run_id).is_finished:
            time.sleep(self.poll_s)
        return LaunchedRun(self.instance, run.run_id)


def shard_files(storage) -> list[str]:
    return landing_shards(storage)[0]
