"""`lm-assets`: small command-line helpers around the code location."""

from __future__ import annotations

import argparse
import os
import sys


def add_shards(args) -> int:
    import dagster as dg

    from lm_assets.defs.automation import landing_shards
    from lm_assets.defs.partitions import shard_partitions
    from lm_assets.defs.resources import LandingResource, default_resources, s3_resource_from_env

    # A folder typed on the command line is relative to where it was typed.
    root = args.landing if not args.landing or args.landing.startswith("s3://") else os.path.abspath(args.landing)
    landing = LandingResource(root=root, s3=s3_resource_from_env()) if root else default_resources()["landing"]
    shards, skipped = landing_shards(landing.storage())
    instance = dg.DagsterInstance.get()
    known = set(instance.get_dynamic_partitions(shard_partitions.name))
    new = [s for s in shards if s not in known]
    if new:
        instance.add_dynamic_partitions(shard_partitions.name, new)
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

    from lm_assets.defs.resources import default_resources
    from lm_assets.lineage_view import trace_sequence

    store = default_resources()["storage"].storage()
    table = trace_sequence(store, args.split, args.index)
    with pl.Config(tbl_rows=100, tbl_width_chars=200, fmt_str_lengths=80, tbl_hide_dataframe_shape=True):
        print(f"{args.split} sequence {args.index}:")
        print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lm-assets")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("add-shards", help="register every shard file in the landing location as a partition")
    p.add_argument("--landing", help="landing folder or s3:// prefix (default: $LM_ASSETS_LANDING_ROOT)")
    p.set_defaults(func=add_shards)
    p = sub.add_parser("lineage", help="the documents (doc_id, URL, shard, WARC record, token span) in a packed sequence")
    p.add_argument("--split", default="train", choices=["train", "val"])
    p.add_argument("--index", type=int, required=True, help="sequence index within the split")
    p.set_defaults(func=lineage)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
