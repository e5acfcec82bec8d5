"""`lm-assets`: small command-line helpers around the code location."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

WORKSPACE_FILE = "workspace.yaml"


def code_location(workspace: str | None = None) -> dict:
    """The one code location `workspace.yaml` declares: its module, location name and working directory
    (absolute, against the workspace file's folder)."""
    import yaml

    from lm_assets.defs.common.environment import project_path

    path = workspace or project_path(WORKSPACE_FILE)
    with open(path) as f:
        entries = (yaml.safe_load(f) or {}).get("load_from") or []
    modules = [entry["python_module"] for entry in entries if "python_module" in entry]
    if len(modules) != 1:
        raise SystemExit(f"{path}: expected one python_module entry under load_from, found {len(modules)}")
    module = modules[0]
    folder = os.path.dirname(os.path.abspath(path))
    return {
        "module_name": module["module_name"],
        "location_name": module.get("location_name", module["module_name"]),
        "working_directory": os.path.normpath(os.path.join(folder, module.get("working_directory", "."))),
    }


def dagster_argv(command: list[str], args: list[str], workspace: str | None = None) -> list[str]:
    """`dagster <command> <args>` pointed at the workspace's code location; `dagster` is the one
    beside this Python."""
    location = code_location(workspace)
    pointer = ["-m", location["module_name"], "-d", location["working_directory"]]
    if command == ["code-server", "start"]:
        pointer += ["--location-name", location["location_name"]]
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    return [dagster if os.path.exists(dagster) else "dagster", *command, *pointer, *args]


def dagster_instance():
    """The instance in $DAGSTER_HOME, whose folder is made when it does not exist yet; a clear error
    when the variable is unset (Dagster would fall back to no instance at all)."""
    import dagster as dg

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise SystemExit(
            "DAGSTER_HOME is not set: it is the folder that holds the Dagster instance (runs, partitions). "
            "Use the project's: export DAGSTER_HOME=$PWD/.dagster_home (make demo and make ui set it)"
        )
    if not os.path.isdir(home):
        os.makedirs(home)
        print(f"created DAGSTER_HOME {home} (an empty SQLite instance)")
    return dg.DagsterInstance.get()


def add_shards(args) -> int:
    from lm_assets.corpus.ingest.readers import landing_shards
    from lm_assets.defs.common.partitions import add_new_partitions, shard_partitions
    from lm_assets.defs.common.resources import LandingResource, default_resources, s3_resource_from_env

    # A folder typed on the command line is relative to where it was typed.
    root = args.landing if not args.landing or args.landing.startswith("s3://") else os.path.abspath(args.landing)
    landing = LandingResource(root=root, s3=s3_resource_from_env()) if root else default_resources()["landing"]
    settle_s = landing.settle_s if args.settle_s is None else args.settle_s
    instance = dagster_instance()
    known = set(instance.get_dynamic_partitions(shard_partitions.name))
    shards, skipped = landing_shards(landing.storage(), settle_s, known=known)
    new = add_new_partitions(instance, shard_partitions, shards)
    print(f"{len(new)} new shard partitions added, {len(shards) - len(new)} already known")
    for shard in new:
        print(f"  {shard}")
    if skipped:
        print(f"{len(skipped)} files skipped:")
        for key, reason in sorted(skipped.items()):
            print(f"  {key!r}: {reason}")
    return 0


def lineage(args) -> int:
    import polars as pl

    from lm_assets.corpus.audit.lineage import trace_sequence
    from lm_assets.defs.common.resources import default_resources

    store = default_resources()["storage"].storage()
    table = trace_sequence(store, args.split, args.index)
    with pl.Config(tbl_rows=100, tbl_width_chars=200, fmt_str_lengths=80, tbl_hide_dataframe_shape=True):
        print(f"{args.split} sequence {args.index}:")
        print(table)
    return 0


def label(args) -> int:
    """A seeded sample of a shard's extracted documents to label by hand, or a local LM's scores for such a file."""
    from lm_assets.corpus.quality import annotate
    from lm_assets.storage.keys import check_name

    try:
        if args.annotate:
            if not args.model:
                raise ValueError("--annotate needs --model: a local Hugging Face causal LM (a folder or a cached name)")
            out = args.out or annotate.annotated_path(args.annotate)
            annotate.check_writable(out, args.force)
            lines = annotate.read_label_lines(args.annotate)
            annotator = annotate.LMAnnotator.load(args.model, device=args.device, max_chars=args.max_chars)

            def progress(i: int, n: int) -> None:
                if i % 10 == 0 or i == n:
                    print(f"  {i}/{n} scored", file=sys.stderr)

            labelled = annotate.annotate_lines(lines, annotator, progress)
            annotate.write_label_lines(out, labelled, force=args.force)
            print(f"{len(labelled)} lines scored by {annotator.source} -> {out}")
            return 0
        if args.shard is None or args.sample is None:
            raise ValueError("give --shard and --sample to draw a sample, or --annotate FILE --model M to score one")
        from lm_assets.defs.common.resources import default_resources
        from lm_assets.storage.layout import stage_keys

        shard = check_name(args.shard)
        out = args.out or f"labels-{shard}-{args.sample}.jsonl"
        annotate.check_writable(out, args.force)
        store = default_resources()["storage"].storage()
        key = stage_keys("extracted", shard)["documents"]
        if not store.exists(key):
            known = sorted({k.split("/")[1] for k in store.list("extracted") if k.endswith("/documents.parquet")})
            raise ValueError(
                f"shard {shard!r} has no extracted output in {store.root} (no {key}): materialize extracted_shard "
                f"for that partition first. Shards with extracted output: {', '.join(known[:20]) or 'none'}"
            )
        docs = store.read_parquet(key, columns=list(annotate.SAMPLE_COLUMNS))
        lines = annotate.sample_for_labelling(docs, args.sample, args.seed)
        annotate.write_label_lines(out, lines, force=args.force)
        print(f"{len(lines)} of {docs.height} documents of {shard} (seed {args.seed}) -> {out}")
        return 0
    except (ValueError, OSError, annotate.AnnotatorLoadError) as exc:
        print(f"lm-assets label: {exc}", file=sys.stderr)
        return 2


def rate(args) -> int:
    """A rating sheet of a checkpoint's samples: one line per prompt and decoding, to rate 1-5 by hand."""
    from lm_assets.defs.common.resources import default_resources
    from lm_assets.evaluation.ratings import rating_sheet, write_sheet
    from lm_assets.storage.keys import UnsafeKeyError, check_name
    from lm_assets.storage.layout import RATINGS_FOLDER, samples_key

    try:
        checkpoint = check_name(args.checkpoint, "checkpoint")
        store = default_resources()["storage"].storage()
        if not store.exists(samples_key(checkpoint)):
            raise ValueError(f"checkpoint {checkpoint!r} has no samples in {store.root} (no {samples_key(checkpoint)}): "
                             "materialize checkpoint_samples for that partition first")  # fmt: skip
        lines = rating_sheet(checkpoint, store.read_parquet(samples_key(checkpoint)))
        out = args.out or f"ratings-{checkpoint}.jsonl"
        write_sheet(out, lines, force=args.force)
    except (ValueError, OSError, UnsafeKeyError) as exc:
        print(f"lm-assets rate: {exc}", file=sys.stderr)
        return 2
    print(f"{len(lines)} samples of {checkpoint} -> {out}: set each line's rating (1-5) and note, then put the file "
          f"under {store.uri(RATINGS_FOLDER)}/ and materialize human_ratings")
    return 0


def postgres_home(args) -> int:
    """Start (or stop) the local PostgreSQL server of a Dagster home and write its dagster.yaml: the
    production instance on this machine. Prints the environment as `export` lines, for a shell's eval."""
    import shlex

    from lm_assets.app import postgres

    home = Path(args.home).resolve()
    if args.stop:
        postgres.stop(home / "pgdata")
        return 0
    try:
        environment = postgres.prepare_home(home)
    except Exception as exc:  # noqa: BLE001 - whatever the server said, said once, without a traceback
        print(f"lm-assets postgres-home: no PostgreSQL server under {home}: {exc}", file=sys.stderr)
        return 1
    for key, value in environment.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def check_instance(args) -> int:
    """Refuse to go on unless the Dagster instance in $DAGSTER_HOME keeps its runs, events and schedules in
    PostgreSQL: what starts on the production configuration must not fall back to SQLite unnoticed."""
    import dagster as dg

    home = os.environ.get("DAGSTER_HOME", "(unset)")
    try:
        with dg.DagsterInstance.get() as instance:
            storages = {name: type(getattr(instance, name)).__name__
                        for name in ("run_storage", "event_log_storage", "schedule_storage")}
    except Exception as exc:  # noqa: BLE001 - an instance that does not load is refused with its reason
        print(f"lm-assets check-instance: the instance in {home} does not load: {exc}", file=sys.stderr)
        return 2
    shown = ", ".join(f"{name} {kind}" for name, kind in storages.items())
    if args.postgres and not all(kind.startswith("Postgres") for kind in storages.values()):
        print(f"lm-assets check-instance: the instance in {home} is not on PostgreSQL ({shown}); refusing to start",
              file=sys.stderr)
        return 2
    print(f"instance in {home}: {shown}")
    return 0


def plan_training(args) -> int:
    """Rank the parallel layouts for a model on a cluster by their estimated memory per GPU
    (lm_assets/training/planner.py), print them and the recommended one with its reason; `--write` saves it as
    `training_run`'s config."""
    import json

    from lm_assets.training import planner

    shape = planner.ModelShape(params=args.params, layers=args.layers, hidden=args.hidden,
                               heads=args.heads or max(1, args.hidden // 128), vocab=args.vocab)
    adapter = planner.lora_params(shape, args.adapter_rank, tuple(args.adapter_targets.split(","))) if args.adapter_rank else None
    tuning = planner.Tuning(adapter_params=adapter, reference=args.dpo_reference)
    if adapter is not None:
        print(f"adapters of rank {args.adapter_rank} on {args.adapter_targets}: {adapter / 1e6:.1f} M parameters trained "
              f"({adapter / args.params:.2%} of {args.params / 1e9:g} B)")
    estimates = planner.plan(shape, args.gpus, args.gpu_memory, args.seq, args.micro_batch, args.grad_accum,
                             args.gpus_per_node, mixed=args.precision != "fp32", tuning=tuning)
    fitting = [e for e in estimates if e.fits]
    print(f"{len(fitting)} of {len(estimates)} layouts fit {args.gpu_memory:g} GiB per GPU; the cheapest {args.top}:")
    print(f"{'layout':64} {'states':>7} {'activ.':>7} {'total':>7}  GiB per GPU")
    for e in (fitting or estimates)[: args.top]:
        print(f"{e.layout.describe():64} {e.model_states_gib:7.1f} {e.activations_gib:7.1f} {e.total_gib:7.1f}"
              + ("" if e.fits else "  does not fit"))
    if not fitting:
        print(f"no layout fits: the smallest needs {min(e.total_gib for e in estimates):.1f} GiB per GPU", file=sys.stderr)
        return 2
    best = fitting[0]
    print(f"\nrecommended: {best.layout.describe()}\n  {planner.reason(best, args.gpus_per_node)}")
    if args.write:
        config = {"ops": {"training_run": {"config": planner.training_run_config(best, args.micro_batch, args.grad_accum)}}}
        Path(args.write).write_text(json.dumps(config, indent=2) + "\n")
        print(f"written as training_run's run config: {args.write}")
    return 0


# Dagster's commands that take a Python module rather than a workspace file, run on the workspace's.
DAGSTER_COMMANDS = {"materialize": ["asset", "materialize"], "code-server": ["code-server", "start"]}


# Seconds a stopped server has to finish the requests in flight before it is killed.
SERVE_GRACE_S = 20


def exported_checkpoints(store) -> list[str]:
    """The `checkpoints` partitions that have an HF export under a local storage root."""
    from lm_assets.storage.layout import CHECKPOINTS_FOLDER, checkpoint_key

    folder = store.local_path(CHECKPOINTS_FOLDER)
    return sorted(checkpoint_key(config.parents[2].name, config.parents[1].name)
                  for config in folder.glob("*/step_*/hf/config.json"))  # fmt: skip


def serve(args) -> int:
    from lm_assets.defs.common.resources import default_resources
    from lm_assets.serving.endpoint import serve_command
    from lm_assets.storage.layout import checkpoint_run_folder, parse_checkpoint_key

    try:  # a malformed key (UnsafeKeyError) or an S3 root, which has no local export to serve
        run, tag = parse_checkpoint_key(args.checkpoint)
        store = default_resources()["storage"].storage()
        export = store.local_path(f"{checkpoint_run_folder(run)}/{tag}/hf")
    except ValueError as exc:
        print(f"lm-assets serve: {exc}", file=sys.stderr)
        return 2
    if not (export / "config.json").exists():
        known = exported_checkpoints(store)
        print(f"lm-assets serve: no export of {args.checkpoint} at {export}: materialize its checkpoint (or any "
              f"evaluation of it) first. Checkpoints exported in {store.root}: {', '.join(known) or 'none'}",
              file=sys.stderr)  # fmt: skip
        return 1
    if args.gguf:
        model = export.parent / "compressed" / f"model-{args.gguf}.gguf"
        if not model.exists():
            print(f"lm-assets serve: no {model}: materialize compressed_checkpoint for {args.checkpoint} first",
                  file=sys.stderr)  # fmt: skip
            return 1
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", args.host,
                   "--port", str(args.port)]  # fmt: skip
    else:
        command = serve_command(export, args.host, args.port)
    print(" ".join(command), flush=True)
    # Under process_tree, in a session of its own: a Ctrl-C reaches the server as a SIGTERM, which it stops on.
    # On SIGINT transformers serve shuts uvicorn down and then waits for ever on its continuous-batching
    # thread (not a daemon); SIGKILL follows a SIGTERM not obeyed within the grace period.
    wrapper = [sys.executable, "-m", "lm_assets.app.process_tree", "--grace-s", str(SERVE_GRACE_S), "--"]
    os.execv(sys.executable, wrapper + command)


def vllm_manifest(args) -> int:
    from lm_assets.serving.vllm import VllmSpec, checkpoint_path, manifests_yaml

    spec = VllmSpec(name=args.name, namespace=args.namespace, model=checkpoint_path(args.checkpoint),
                    draft=checkpoint_path(args.draft) if args.draft else None, tensor_parallel=args.tensor_parallel,
                    claim=args.claim, served_name=args.checkpoint,
                    **({"image": args.image} if args.image else {}))  # fmt: skip
    print(manifests_yaml(spec), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DAGSTER_COMMANDS:
        command = dagster_argv(DAGSTER_COMMANDS[argv[0]], argv[1:])
        os.execv(command[0], command)
    parser = argparse.ArgumentParser(prog="lm-assets")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in DAGSTER_COMMANDS.items():
        sub.add_parser(name, add_help=False,
                       help=f"dagster {' '.join(command)} on workspace.yaml's code location (its options follow)")
    p = sub.add_parser("add-shards", help="register every shard file in the landing location as a partition")
    p.add_argument("--landing", help="landing folder or s3:// prefix (default: $LM_ASSETS_LANDING_ROOT)")
    p.add_argument("--settle-s", type=float, help="take a file once unchanged this many seconds, or marked complete "
                   "by <name>.done (default: the landing resource's settle_s, 60)")  # fmt: skip
    p.set_defaults(func=add_shards)
    p = sub.add_parser("serve", help="an OpenAI-compatible endpoint (/v1/chat/completions) on a checkpoint's HF export: "
                       "transformers serve with continuous batching, or llama.cpp's server on its GGUF")  # fmt: skip
    p.add_argument("--checkpoint", required=True, help="the checkpoints partition served, e.g. dpo-step_00000030")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--gguf", choices=["f16", "q8_0"], help="serve compressed_checkpoint's GGUF with llama_cpp.server "
                   "(llama-cpp-python) instead")  # fmt: skip
    p.set_defaults(func=serve)
    p = sub.add_parser("vllm-manifest", help="a vLLM Deployment and Service (Kubernetes YAML) serving a checkpoint's "
                       "export, with tensor parallelism and, given a draft checkpoint, speculative decoding")  # fmt: skip
    p.add_argument("--checkpoint", required=True, help="the checkpoints partition served, e.g. dpo-step_00000030")
    p.add_argument("--draft", help="a smaller checkpoints partition that proposes tokens (speculative decoding)")
    p.add_argument("--tensor-parallel", type=int, default=1, help="GPUs the model is split over (one pod)")
    p.add_argument("--name", default="lm-assets-vllm")
    p.add_argument("--namespace", default="default")
    p.add_argument("--image", default=None, help="the vLLM image (default: vllm/vllm-openai of the tested version)")
    p.add_argument("--claim", default="lm-assets-checkpoints", help="the PersistentVolumeClaim holding checkpoints/")
    p.set_defaults(func=vllm_manifest)
    p = sub.add_parser("lineage", help="the documents (doc_id, URL, shard, WARC record, token span) in a packed sequence")
    p.add_argument("--split", default="train", choices=["train", "val"])
    p.add_argument("--index", type=int, required=True, help="sequence index within the split")
    p.set_defaults(func=lineage)
    p = sub.add_parser("label", help="a sample of a shard's documents to label by hand, or a local LM's scores for one")
    p.add_argument("--shard", help="shard whose extracted_shard output is sampled")
    p.add_argument("--sample", type=int, help="number of documents to draw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--annotate", metavar="FILE", help="a label file to score with --model instead of drawing a sample")
    p.add_argument("--model", help="local Hugging Face causal LM: a folder or a name in the local cache (no downloads)")
    p.add_argument("--max-chars", type=int, default=4000, help="characters of each text the model reads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", help="output JSONL (default: labels-<shard>-<N>.jsonl here; with --annotate, "
                   "<FILE stem>.annotated.jsonl beside FILE)")  # fmt: skip
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.set_defaults(func=label)
    p = sub.add_parser("plan-training", help="rank the parallel layouts (dp, tp, pp, ZeRO, offload, activation "
                       "checkpointing) for a model on a cluster by estimated memory per GPU")  # fmt: skip
    p.add_argument("--params", type=float, required=True, help="parameters, e.g. 7e9")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, help="attention heads (default: hidden / 128)")
    p.add_argument("--vocab", type=int, default=32_000)
    p.add_argument("--seq", type=int, required=True, help="sequence length in tokens")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpu-memory", type=float, required=True, help="GiB per GPU")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=8)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--top", type=int, default=10, help="layouts listed")
    p.add_argument("--adapter-rank", type=int, default=0, help="train low-rank adapters of this rank instead of every "
                   "weight (0: a full fine-tune)")  # fmt: skip
    p.add_argument("--adapter-targets", default="q_proj,k_proj,v_proj,o_proj", help="the layers adapted, comma-separated")
    p.add_argument("--dpo-reference", default="none", choices=["none", "held"], help="DPO's reference model: held in "
                   "memory beside the trained one, or none (not DPO; or its log-probabilities precomputed; or adapters)")  # fmt: skip
    p.add_argument("--write", metavar="FILE", help="write the recommended layout as training_run's run config (JSON)")
    p.set_defaults(func=plan_training)
    p = sub.add_parser("rate", help="a sheet of a checkpoint's samples to rate by hand (1-5 and a note) for human_ratings")
    p.add_argument("--checkpoint", required=True, help="a checkpoints partition, e.g. main-step_00000040")
    p.add_argument("--out", help="output JSONL (default: ratings-<checkpoint>.jsonl here)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.set_defaults(func=rate)
    p = sub.add_parser("postgres-home", help="start the local PostgreSQL server of a Dagster home (the production "
                       "instance on this machine) and print its environment; --stop stops it")  # fmt: skip
    p.add_argument("home", help="the Dagster home: dagster.yaml is written there, the server's data in pgdata/")
    p.add_argument("--stop", action="store_true")
    p.set_defaults(func=postgres_home)
    p = sub.add_parser("check-instance", help="say which storage the Dagster instance in $DAGSTER_HOME uses; "
                       "with --postgres, fail unless it is PostgreSQL")  # fmt: skip
    p.add_argument("--postgres", action="store_true", help="fail unless runs, events and schedules are in PostgreSQL")
    p.set_defaults(func=check_instance)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
