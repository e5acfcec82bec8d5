"""What Dagster adds to the pipeline: a per-shard run against the same stage functions, and a landing
sensor tick over many new shards with the runs it submits to the queued run coordinator.

1. Per-run overhead, in one process. On one shard of the sample crawl, each per-shard job runs as
   `job.execute_in_process(partition_key=..., instance=...)` (as `local_run` runs it) on a SQLite
   instance in a temporary DAGSTER_HOME (deploy/dagster.yaml) and on an ephemeral instance; the stage
   functions are the calls its assets make (readers, extract, curation, minhash, dedup, decontam,
   tokens) with the same configs, reading and publishing the same files. Overhead = run - stage
   functions: Dagster itself, the event log, the metadata and the asset checks.
2. Backfill of `--shards` new landing files (hard links of one sample shard):
   (a) one `landing_sensor` evaluation in-process (`dg.build_sensor_context`), then its partition
       request applied with `instance.add_dynamic_partitions`, then a second tick that finds nothing new;
   (b) the sensor daemon's own tick (`dagster._daemon.sensor.execute_sensor_iteration`, an internal API,
       on an in-process code location) over `--submit` new files in a fresh instance: evaluation,
       partitions added, one run created and submitted to the instance's run coordinator (deploy/
       dagster.yaml: QueuedRunCoordinator) per request. The runs stay QUEUED: nothing executes them.

It prints figures; it checks nothing. The last line is a JSON object, also written to
`$OUT/dagster_overhead.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib.paths import REPO, write_report

SAMPLE_CRAWL = REPO / "data" / "sample-crawl"
SHARD = "crawl-00000.warc.gz"
VOCAB_SIZE = 4000
# The per-shard jobs and the assets each one materializes, in order.
JOBS = {
    "landed_shard_job": ["raw_shard", "extracted_shard", "curated_shard", "minhash_signatures"],
    "shard_ingest_job": ["raw_shard", "extracted_shard"],
    "shard_curation_job": ["curated_shard", "minhash_signatures"],
    "deduplicated_shard_job": ["deduplicated_shard", "decontaminated_shard"],
    "tokenized_shard_job": ["tokenized_shard"],
}


def run_config() -> dict:
    from lm_assets.app.local_run import OFFLINE_RUN_CONFIG

    ops = dict(OFFLINE_RUN_CONFIG["ops"])
    ops["tokenizer"] = {"config": {"vocab_size": VOCAB_SIZE}}
    ops["packed_dataset"] = {"config": {"seq_len": 257, "val_fraction": 0.05}}
    return {"ops": ops}


def new_dagster_home(parent: Path, name: str) -> Path:
    """A DAGSTER_HOME holding deploy/dagster.yaml, as `make` makes one."""
    home = parent / name
    home.mkdir()
    shutil.copyfile(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    return home


def use_environment(work: Path, landing: Path) -> None:
    os.environ["DAGSTER_HOME"] = str(work / "home")
    os.environ["LM_ASSETS_STORAGE_ROOT"] = str(work / "storage")
    os.environ["LM_ASSETS_LANDING_ROOT"] = str(landing)
    os.environ["LM_ASSETS_TOXICITY_BACKEND"] = "profanity_check"


def timed(fn, *args, **kwargs) -> tuple[dict, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn(*args, **kwargs)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}, value


def medians(samples: list[dict]) -> dict:
    return {key: round(statistics.median(s[key] for s in samples), 4) for key in ("wall_s", "cpu_s")}


# 1. per-run overhead -----------------------------------------------------------------------------
def prepare(work: Path, jobs: list[str]) -> None:
    """Every input the jobs read for the sample crawl's shards, made by the real graph (run in a
    subprocess, so that the measuring process starts cold)."""
    import dagster as dg

    from lm_assets.app.local_run import run_shard_graph, shard_files
    from lm_assets.definitions import defs
    from lm_assets.defs.common.partitions import add_new_partitions, shard_partitions
    from lm_assets.defs.common.resources import default_resources

    use_environment(work, SAMPLE_CRAWL)
    instance = dg.DagsterInstance.get()
    shards = shard_files(default_resources()["landing"].storage())
    if set(jobs) <= {"shard_ingest_job", "landed_shard_job"}:
        add_new_partitions(instance, shard_partitions, shards)
        return
    with open(work / "dagster.log", "a") as log, contextlib.redirect_stderr(log):
        results = run_shard_graph(defs, instance, shards, run_config(), through_packing="tokenized_shard_job" in jobs)
    if not results[-1].success:
        raise SystemExit(f"preparing the sample crawl failed: see {work / 'dagster.log'}")


def stage_functions(store, landing, shard: str) -> dict:
    """Each asset's work without Dagster: the corpus calls with the assets' configs, reading and
    publishing the same files."""
    import polars as pl

    from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
    from lm_assets.corpus.curation.pipeline import curate
    from lm_assets.corpus.decontam.contamination import DecontamConfig, find_contamination
    from lm_assets.corpus.dedup.decisions import apply_dedup
    from lm_assets.corpus.dedup.sketches import band_table, sketch_documents
    from lm_assets.corpus.ingest.readers import ReaderConfig, read_shard
    from lm_assets.corpus.quality.registry import current_classifier
    from lm_assets.corpus.tokens.tokenize import tokenize_shard
    from lm_assets.defs.common.config import to_dataclass
    from lm_assets.defs.curation.assets import CuratedShardConfig, ExtractedShardConfig
    from lm_assets.defs.decontam.assets import EVALUATION_SET_FIELDS, DecontaminatedShardConfig, contamination_index
    from lm_assets.defs.dedup.assets import DedupSettings
    from lm_assets.defs.tokens.assets import current_tokenizer
    from lm_assets.storage.layout import CLUSTERS_KEY, raw_keys, stage_folder, stage_keys

    def documents(stage):
        return store.read_parquet(stage_keys(stage, shard)["documents"])

    def publish(stage, result, extra=None):
        store.publish(stage_folder(stage, shard),
                      {"documents.parquet": result.kept, "dropped.parquet": result.dropped, **(extra or {})})

    def raw_shard():
        with landing.local_copy(shard) as path:
            read = read_shard(path, source=shard, config=ReaderConfig())
            summary = json.dumps({"records": read.records, "bytes": path.stat().st_size}).encode()
        store.publish(stage_folder("raw", shard), {"documents.parquet": read.documents, "dropped.parquet": read.dropped,
                                                   "quarantine.parquet": read.quarantine, "summary.json": summary})

    def extracted_shard():
        raw = store.read_parquet(raw_keys(shard)["documents"])
        publish("extracted", extract_documents(raw, to_dataclass(ExtractConfig, ExtractedShardConfig())))

    def curated_shard():
        config = CuratedShardConfig(**run_config()["ops"]["curated_shard"]["config"])
        classifier, _ = current_classifier(store) or (None, None)
        result = curate(documents("extracted"), config.curation_config(classifier))
        record = {"policy": config.quality_policy, "classifier_hash": classifier.hash if classifier else None}
        publish("curated", result, {"curation.json": json.dumps(record).encode()})

    def minhash_signatures():
        docs = documents("curated")
        config = DedupSettings().dedup_config()
        sketches = sketch_documents(docs, config).with_columns(pl.lit(shard).alias("source"), docs["lang"].alias("lang"))
        store.publish(stage_folder("minhash", shard),
                      {"sketches.parquet": sketches, "bands.parquet": band_table(sketches, config)})

    def deduplicated_shard():
        docs = documents("curated")
        clusters = store.scan_parquet(CLUSTERS_KEY).filter(pl.col("doc_id").is_in(docs["doc_id"].implode())).collect()
        publish("deduplicated", apply_dedup(docs, clusters))

    def decontaminated_shard():
        config = DecontaminatedShardConfig()
        cfg = to_dataclass(DecontamConfig, config, exclude=EVALUATION_SET_FIELDS)
        index = contamination_index(config.mmlu_path, tuple(config.ceval_paths), cfg)
        publish("decontaminated", find_contamination(documents("deduplicated"), index, cfg))

    def tokenized_shard():
        sp, info = current_tokenizer(store)
        docs = store.read_parquet(stage_keys("decontaminated", shard)["documents"], columns=["doc_id", "text"])
        tokens = tokenize_shard(docs, sp, info["tokenizer_hash"], num_threads=os.cpu_count() or 1)
        store.publish(stage_folder("tokenized", shard), {"tokens.bin": tokens.to_bytes(), "index.parquet": tokens.index,
                                                         "tokens.json": json.dumps(tokens.sidecar).encode()})

    return {fn.__name__: fn for fn in (raw_shard, extracted_shard, curated_shard, minhash_signatures,
                                        deduplicated_shard, decontaminated_shard, tokenized_shard)}


def run_job(job, instance, log) -> None:
    from lm_assets.app.local_run import run_config_for

    with contextlib.redirect_stderr(log):
        result = job.execute_in_process(partition_key=SHARD, instance=instance,
                                        run_config=run_config_for(run_config(), job), raise_on_error=False)
    if not result.success:
        raise SystemExit(f"{job.name} failed on {SHARD}: see {log.name}")


def per_run_overhead(work: Path, jobs: list[str], repeats: int) -> dict:
    subprocess.run([sys.executable, __file__, "--prepare", str(work), "--jobs", ",".join(jobs)], check=True)
    use_environment(work, SAMPLE_CRAWL)
    wall, cpu = time.perf_counter(), time.process_time()
    import dagster as dg

    from lm_assets.definitions import defs
    from lm_assets.defs.common.resources import default_resources
    imports = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}

    resources = default_resources()
    stages = stage_functions(resources["storage"].storage(), resources["landing"].storage(), SHARD)
    sqlite = dg.DagsterInstance.get()
    ephemeral = dg.DagsterInstance.ephemeral()
    ephemeral.add_dynamic_partitions("shards", sqlite.get_dynamic_partitions("shards"))
    report = {"shard": SHARD, "imports": imports, "jobs": {}}
    with open(work / "dagster.log", "a") as log:
        for number, name in enumerate(jobs):
            job = defs.resolve_job_def(name)

            def plain():
                for asset in JOBS[name]:
                    stages[asset]()

            samples = {"stage_functions": [], "run_sqlite": [], "run_ephemeral": []}
            cold = {}
            for repeat in range(repeats + 1):
                samples["stage_functions"].append(timed(plain)[0])
                samples["run_sqlite"].append(timed(run_job, job, sqlite, log)[0])
                samples["run_ephemeral"].append(timed(run_job, job, ephemeral, log)[0])
                if repeat == 0:
                    # The first pass warms models and caches; for the first job it also pays Dagster's
                    # first run in the process.
                    cold = {key: runs.pop() for key, runs in samples.items()}
            figures = {key: medians(runs) for key, runs in samples.items()}
            for instance in ("sqlite", "ephemeral"):
                figures[f"overhead_{instance}"] = {
                    key: round(figures[f"run_{instance}"][key] - figures["stage_functions"][key], 4)
                    for key in ("wall_s", "cpu_s")
                }
            if number == 0:
                figures["cold"] = {key: {k: round(v, 4) for k, v in sample.items()} for key, sample in cold.items()}
            report["jobs"][name] = figures
            print_job(name, figures)
    return report


def print_job(name: str, figures: dict) -> None:
    def cell(key):
        return f"{figures[key]['wall_s']:7.3f} {figures[key]['cpu_s']:7.3f}"

    print(f"{name:24} {cell('stage_functions')} | {cell('run_sqlite')} {cell('overhead_sqlite')} | "
          f"{cell('run_ephemeral')} {cell('overhead_ephemeral')}", flush=True)
    if "cold" in figures:
        cold = figures["cold"]
        stage, run = cold["stage_functions"], cold["run_sqlite"]
        print(f"{'  first pass (cold)':24} {stage['wall_s']:7.3f} {stage['cpu_s']:7.3f} | {run['wall_s']:7.3f} "
              f"{run['cpu_s']:7.3f} {run['wall_s'] - stage['wall_s']:7.3f} {run['cpu_s'] - stage['cpu_s']:7.3f}",
              flush=True)


# 2. backfill of many landing files ---------------------------------------------------------------
def landing_folder(parent: Path, name: str, shards: int) -> Path:
    """`shards` landing files: hard links of one sample shard (copies where links fail)."""
    landing = parent / name
    landing.mkdir()
    for number in range(shards):
        target = landing / f"shard-{number:05d}.warc.gz"
        try:
            os.link(SAMPLE_CRAWL / SHARD, target)
        except OSError:
            shutil.copyfile(SAMPLE_CRAWL / SHARD, target)
    return landing


def sensor_in_process(work: Path, landing: Path) -> dict:
    """One landing_sensor evaluation through `build_sensor_context`, its partitions added as the daemon
    would, then a tick that finds nothing new."""
    import dagster as dg

    from lm_assets.defs.automation import landing_sensor
    from lm_assets.defs.common.resources import default_resources

    instance = dg.DagsterInstance.from_config(str(new_dagster_home(work, "sensor-home")))

    def tick():
        with dg.build_sensor_context(instance=instance, resources={"landing": default_resources()["landing"]}) as context:
            return landing_sensor(context)

    first, result = timed(tick)
    requests = result.dynamic_partitions_requests[0]
    added, _ = timed(instance.add_dynamic_partitions, requests.partitions_def_name, list(requests.partition_keys))
    again, quiet = timed(tick)
    return {
        "tick": first, "run_requests": len(result.run_requests), "partitions_requested": len(requests.partition_keys),
        "add_partitions": added, "partitions_registered": len(instance.get_dynamic_partitions("shards")),
        "second_tick": again, "second_tick_skip_reason": quiet.skip_reason,
    }


def in_process_workspace(instance):
    """The code location as the daemons see it, loaded in this process (internal APIs)."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="lm_assets.definitions", attribute="defs", working_directory=str(REPO)),
        location_name="lm_assets",
    )
    return WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin))


def daemon_logger(work: Path, name: str) -> logging.Logger:
    logger = logging.getLogger(f"dagster_overhead.{name}")
    logger.addHandler(logging.FileHandler(work / f"{name}.log"))
    logger.propagate = False
    return logger


def run_shapes(runs, order: list[str]) -> dict:
    """How many runs hold how many shards, {shards in the run: runs}; `order` is the partitions' order."""
    position = {key: i for i, key in enumerate(order)}
    shapes: dict[int, int] = {}
    for run in runs:
        start, end = run.tags.get("dagster/asset_partition_range_start"), run.tags.get("dagster/asset_partition_range_end")
        size = 1 if start is None else position[end] - position[start] + 1
        shapes[size] = shapes.get(size, 0) + 1
    return dict(sorted(shapes.items()))


def daemon_tick(work: Path, landing: Path) -> dict:
    """The sensor daemon's tick over `landing`: evaluation, partitions, runs created and submitted to the
    instance's run coordinator."""
    import dagster as dg
    from dagster._daemon.sensor import execute_sensor_iteration

    os.environ["LM_ASSETS_LANDING_ROOT"] = str(landing)
    instance = dg.DagsterInstance.from_config(str(new_dagster_home(work, "daemon-home")))
    loaded, workspace = timed(in_process_workspace, instance)
    location = workspace.create_request_context().get_code_location("lm_assets")
    sensor = next(iter(location.get_repositories().values())).get_sensor("landing_sensor")
    instance.start_sensor(sensor)
    logger = daemon_logger(work, "sensor_daemon")
    tick_time, _ = timed(lambda: list(execute_sensor_iteration(workspace, logger, None, None)))
    ticks = instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, limit=1)
    runs = instance.get_runs()
    statuses = {}
    for run in runs:
        statuses[run.status.value] = statuses.get(run.status.value, 0) + 1
    shards = instance.get_dynamic_partitions("shards")
    return {
        "run_coordinator": type(instance.run_coordinator).__name__,
        "workspace_load": loaded, "tick": tick_time, "tick_status": ticks[0].status.value,
        "partitions_registered": len(shards), "runs": statuses, "shards_per_run": run_shapes(runs, shards),
        "per_run": {key: value / max(len(runs), 1) for key, value in tick_time.items()},
        "per_shard": {key: value / max(len(shards), 1) for key, value in tick_time.items()},
    }


def backfill(work: Path, shards: int, submitted: int) -> dict:
    landing = landing_folder(work, "landing", shards)
    os.environ["LM_ASSETS_LANDING_ROOT"] = str(landing)
    report = {"shards": shards, "in_process": sensor_in_process(work, landing)}
    report["daemon"] = daemon_tick(work, landing_folder(work, "landing-daemon", submitted))
    sensor, daemon = report["in_process"], report["daemon"]
    print(f"\nlanding_sensor over {shards} new files, wall / CPU s:")
    print(f"  sensor evaluation (build_sensor_context)   {sensor['tick']['wall_s']:8.3f} {sensor['tick']['cpu_s']:8.3f}"
          f"  {sensor['run_requests']} run requests, {sensor['partitions_requested']} partitions requested")
    print(f"  add_dynamic_partitions                     {sensor['add_partitions']['wall_s']:8.3f} "
          f"{sensor['add_partitions']['cpu_s']:8.3f}  {sensor['partitions_registered']} registered")
    print(f"  second tick, nothing new                   {sensor['second_tick']['wall_s']:8.3f} "
          f"{sensor['second_tick']['cpu_s']:8.3f}")
    print(f"sensor daemon tick over {submitted} new files ({daemon['run_coordinator']}): evaluate, add partitions, "
          "create and submit the runs")
    print(f"  whole tick                                 {daemon['tick']['wall_s']:8.3f} {daemon['tick']['cpu_s']:8.3f}"
          f"  runs {daemon['runs']}, tick {daemon['tick_status']}, shards per run {daemon['shards_per_run']}")
    print(f"  per shard                                  {daemon['per_shard']['wall_s']:8.3f} "
          f"{daemon['per_shard']['cpu_s']:8.3f}  ({shards} shards at that rate: "
          f"{daemon['per_shard']['wall_s'] * shards:.0f} s wall, {daemon['per_shard']['cpu_s'] * shards:.0f} s CPU)")
    return report


# 3. asset backfills over many registered shards -------------------------------------------------
BACKFILL_ASSETS = JOBS["landed_shard_job"]


def asset_backfill(work: Path, registered: int) -> dict:
    """A backfill of the per-shard curation assets over `registered` shards in a fresh SQLite instance, run
    by the backfill daemon's own iteration until it submits no more runs (the runs stay QUEUED)."""
    import dagster as dg
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id
    from dagster._daemon.backfill import execute_backfill_iteration

    home = new_dagster_home(work, f"backfill-{registered}")
    instance = dg.DagsterInstance.from_config(str(home))
    keys = [f"shard-{number:05d}.warc.gz" for number in range(registered)]
    register, _ = timed(instance.add_dynamic_partitions, "shards", keys)
    loaded, workspace = timed(in_process_workspace, instance)
    asset_graph = workspace.create_request_context().asset_graph
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(), asset_graph=asset_graph, partition_names=None,
        asset_selection=[dg.AssetKey(name) for name in BACKFILL_ASSETS], backfill_timestamp=time.time(), tags={},
        dynamic_partitions_store=instance, all_partitions=True, title=None, description=None, run_config=None,
    )
    instance.add_backfill(backfill)
    logger = daemon_logger(work, f"backfill_daemon_{registered}")
    iterations, runs = [], 0
    while len(iterations) < 20:
        figures, _ = timed(lambda: list(execute_backfill_iteration(workspace, logger)))
        iterations.append(figures)
        now = instance.get_runs_count()
        if iterations and now == runs and len(iterations) > 1:
            break
        runs = now
    submitted = instance.get_runs()
    total = {key: sum(i[key] for i in iterations) for key in ("wall_s", "cpu_s")}
    assets = {len(run.asset_selection or ()) for run in submitted}
    return {
        "registered": registered, "register_partitions": register, "workspace_load": loaded,
        "iterations": len(iterations), "first_iteration": iterations[0], "backfill_iterations": total,
        "runs": len(submitted), "shards_per_run": run_shapes(submitted, keys), "assets_per_run": sorted(assets),
        "per_run": {key: value / max(len(submitted), 1) for key, value in total.items()},
        "per_shard": {key: value / registered for key, value in total.items()},
        "backfill_status": instance.get_backfill(backfill.backfill_id).status.value,
    }


def asset_backfills(work: Path, sizes: list[int]) -> list[dict]:
    print(f"\nasset backfill of {', '.join(BACKFILL_ASSETS)} over every registered shard, the backfill daemon's "
          f"iterations until no new run (BackfillPolicy: {shards_per_run()} shards a run), wall / CPU s:")
    reports = []
    for registered in sizes:
        report = asset_backfill(work, registered)
        reports.append(report)
        total, per_run = report["backfill_iterations"], report["per_run"]
        print(f"  {registered:6d} shards: register {report['register_partitions']['wall_s']:6.2f} s; "
              f"{report['iterations']} iterations {total['wall_s']:8.2f} {total['cpu_s']:8.2f}; "
              f"{report['runs']} runs (shards per run {report['shards_per_run']}, assets per run "
              f"{report['assets_per_run']}); per run {per_run['wall_s']:.3f} {per_run['cpu_s']:.3f}; "
              f"per shard {report['per_shard']['wall_s'] * 1000:.1f} ms wall", flush=True)
    return reports


def shards_per_run() -> int:
    from lm_assets.defs.common.partitions import SHARDS_PER_RUN

    return SHARDS_PER_RUN


# 4. a run of several shards against one run per shard ---------------------------------------------
def multi_shard_run(work: Path, job_name: str, count: int) -> dict:
    """`job_name` over `count` landing shards (hard links of one sample shard): one run of their partition
    range, then one run per shard, each in a fresh SQLite instance; the stage functions on each shard."""
    import dagster as dg

    from lm_assets.app.local_run import run_config_for
    from lm_assets.definitions import defs
    from lm_assets.defs.common.partitions import partition_range_tags
    from lm_assets.defs.common.resources import default_resources

    landing = landing_folder(work, f"landing-{job_name}", count)
    keys = sorted(path.name for path in landing.iterdir())
    job = defs.resolve_job_def(job_name)
    figures = {}
    with open(work / "dagster.log", "a") as log:
        for mode in ("one_run", "run_per_shard", "stage_functions"):
            folder = work / f"{job_name}-{mode}"
            folder.mkdir()
            home = new_dagster_home(folder, "home")
            use_environment(folder, landing)
            instance = dg.DagsterInstance.from_config(str(home))
            instance.add_dynamic_partitions("shards", keys)
            config = run_config_for(run_config(), job)

            def one_run():
                with contextlib.redirect_stderr(log):
                    result = job.execute_in_process(instance=instance, run_config=config, raise_on_error=False,
                                                    tags=partition_range_tags(keys[0], keys[-1]))
                if not result.success:
                    raise SystemExit(f"{job_name} over {count} shards failed: see {log.name}")

            def run_per_shard():
                with contextlib.redirect_stderr(log):
                    for key in keys:
                        result = job.execute_in_process(partition_key=key, instance=instance, run_config=config,
                                                        raise_on_error=False)
                        if not result.success:
                            raise SystemExit(f"{job_name} on {key} failed: see {log.name}")

            def stage_functions_only():
                resources = default_resources()
                for key in keys:
                    stages = stage_functions(resources["storage"].storage(), resources["landing"].storage(), key)
                    for asset in JOBS[job_name]:
                        stages[asset]()

            run = {"one_run": one_run, "run_per_shard": run_per_shard, "stage_functions": stage_functions_only}[mode]
            figures[mode] = {key: round(value, 3) for key, value in timed(run)[0].items()}
    for mode in ("one_run", "run_per_shard"):
        figures[f"overhead_per_shard_{mode}"] = {
            key: round((figures[mode][key] - figures["stage_functions"][key]) / count, 4) for key in ("wall_s", "cpu_s")
        }
    return {"job": job_name, "shards": count, **figures}


def print_multi_shard(report: dict) -> None:
    def cell(key):
        return f"{report[key]['wall_s']:8.2f} {report[key]['cpu_s']:8.2f}"

    print(f"\n{report['job']} over {report['shards']} shards, wall / CPU s (the first run of a process is cold):")
    print(f"  stage functions                            {cell('stage_functions')}")
    print(f"  one run of the {report['shards']} shards' range            {cell('one_run')}  Dagster per shard "
          f"{cell('overhead_per_shard_one_run')}")
    print(f"  one run per shard                          {cell('run_per_shard')}  Dagster per shard "
          f"{cell('overhead_per_shard_run_per_shard')}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="warm repeats per job (after one cold pass)")
    parser.add_argument("--shards", type=int, default=1000, help="new landing files for the sensor and backfill")
    parser.add_argument("--submit", type=int, default=100,
                        help="new landing files for the daemon tick that creates and submits one run each")
    parser.add_argument("--jobs", default=",".join(JOBS), help="per-shard jobs to time")
    parser.add_argument("--skip-backfill", action="store_true", help="per-run overhead only")
    parser.add_argument("--registered", default="1000,10000",
                        help="registered shards of each asset backfill that the backfill daemon submits")
    parser.add_argument("--run-shards", type=int, default=10,
                        help="shards of the run that is timed against one run per shard")
    parser.add_argument("--run-job", default="landed_shard_job", help="the job of that comparison")
    parser.add_argument("--smoke", action="store_true",
                        help="shard_ingest_job, 1 repeat, 20 shards for the sensor, 5 runs submitted: seconds")
    parser.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    jobs = args.jobs.split(",")
    if args.prepare:
        prepare(args.prepare, jobs)
        return 0
    if args.smoke:
        args.repeats, args.shards, args.submit, jobs = 1, 20, 5, ["shard_ingest_job"]
        args.registered, args.run_shards, args.run_job = "120", 2, "shard_ingest_job"
    report = {"repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="dagster-overhead-") as tmp:
        work = Path(tmp)
        (work / "per-run").mkdir()
        new_dagster_home(work / "per-run", "home")
        print(f"per-shard run on {SHARD}: medians of {args.repeats} warm repeats, wall and CPU s")
        print(f"{'job':24} {'stage functions':>15} | {'run, SQLite':>15} {'overhead':>15} | "
              f"{'run, ephemeral':>15} {'overhead':>15}")
        report["per_run"] = per_run_overhead(work / "per-run", jobs, args.repeats)
        if not args.skip_backfill:
            report["backfill"] = backfill(work, args.shards, args.submit)
            report["asset_backfills"] = asset_backfills(work, [int(n) for n in args.registered.split(",")])
            report["multi_shard_run"] = multi_shard_run(work, args.run_job, args.run_shards)
            print_multi_shard(report["multi_shard_run"])
    write_report("dagster_overhead.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
