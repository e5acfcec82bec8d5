"""Peak memory and CPU time of the per-shard stages as a shard grows: raw_shard, extracted_shard, curated_shard.

Usage::

    .venv/bin/python bench/shard_memory.py [--records 5000,20000,35000] [--page-kb 130] [--smoke]

A shard of N WARC responses is built from the sample crawl's HTML pages (data/sample-crawl), cycled with
unique URLs, each page padded to about `--page-kb` KB with an inline script and a navigation list, as Common
Crawl pages carry them (their HTML averages about 130 KB: 35,000 responses, 4-5 GB). Each stage then
materializes the shard's partition in a process of its own (`dg.materialize` on an ephemeral instance,
local storage, the offline toxicity backend, the default quality policy), so its peak RSS
(`getrusage`, maxrss) is its own. CPU time is the process's user + system time, imports included.
`--smoke` builds 300 records of 20 KB, in seconds.

It prints figures; it checks nothing. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib.crawl.warc import ShardWriter
from benchlib.paths import REPO, command_line

from lm_assets.corpus.ingest.readers import read_shard

SAMPLE_CRAWL = REPO / "data" / "sample-crawl"
STAGES = ("raw_shard", "extracted_shard", "curated_shard")
STAGE_RUN = """
import json, resource, sys, time
import dagster as dg
from lm_assets.app.local_run import OFFLINE_RUN_CONFIG
from lm_assets.defs.common.resources import LandingResource, StorageResource
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import curated_shard, extracted_shard
from lm_assets.defs.ingest.assets import raw_shard

stage, shard, storage, landing = sys.argv[1:5]
asset = {"raw_shard": raw_shard, "extracted_shard": extracted_shard, "curated_shard": curated_shard}[stage]
instance = dg.DagsterInstance.ephemeral()
instance.add_dynamic_partitions("shards", [shard])
ops = {k: v for k, v in OFFLINE_RUN_CONFIG["ops"].items() if k == stage}
started = time.perf_counter()
result = dg.materialize([asset], partition_key=shard, instance=instance,
                        run_config={"ops": ops, "resources": OFFLINE_RUN_CONFIG["resources"]},
                        resources={"storage": StorageResource(root=storage), "landing": LandingResource(root=landing),
                                   "toxicity": ToxicityResource()},
                        selection=[asset.key])
usage = resource.getrusage(resource.RUSAGE_SELF)
meta = result.asset_materializations_for_node(stage)[0].metadata
print(json.dumps({"ok": result.success, "wall_s": round(time.perf_counter() - started, 2),
                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024),
                  "batches": meta["batches"].value if "batches" in meta else None,
                  "documents_out": meta["documents_out"].value}))
"""


def source_pages() -> list[str]:
    pages = []
    for shard in sorted(SAMPLE_CRAWL.glob("crawl-*.warc.gz")):
        pages += [html for html in read_shard(shard).documents["html"] if html]
    return pages


def padded(html: str, target_bytes: int, index: int) -> str:
    """`html` with an inline script and a navigation list before </body>, up to about `target_bytes`."""
    missing = target_bytes - len(html.encode())
    if missing <= 0:
        return html
    nav = "".join(f'<li><a href="/section/{index % 50}/{k}">Section {k}</a></li>' for k in range(40))
    script_bytes = max(0, missing - len(nav) - 40)
    script = '{"config": "' + ("x1y2z3" * (script_bytes // 6 + 1))[:script_bytes] + '"}'
    extra = f"<nav><ul>{nav}</ul></nav><script>window.__STATE__ = {script};</script>"
    at = html.lower().rfind("</body")
    return html[:at] + extra + html[at:] if at >= 0 else html + extra


def build_shard(path: Path, records: int, page_kb: int) -> float:
    """Write the shard; returns its MB of HTML."""
    import random
    from datetime import datetime, timezone

    pages = source_pages()
    writer = ShardWriter(path, random.Random(records), {"software": "bench/shard_memory.py"}, datetime(2024, 3, 1, tzinfo=timezone.utc))
    total = 0
    for i in range(records):
        body = padded(pages[i % len(pages)], page_kb * 1000, i).encode()
        total += len(body)
        writer.response(f"https://pages.example/{i}", body, datetime(2024, 3, 1, tzinfo=timezone.utc),
                        [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))])
    writer.close()
    return total / 1e6


def run_stage(stage: str, shard: Path, storage: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", STAGE_RUN, stage, shard.name, str(storage), str(shard.parent)],
                          capture_output=True, text=True, check=False, cwd=REPO)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{stage} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="5000,20000,35000")
    parser.add_argument("--page-kb", type=int, default=130)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    sizes = [300] if args.smoke else [int(n) for n in args.records.split(",")]
    page_kb = 20 if args.smoke else args.page_kb
    rows = []
    for records in sizes:
        with tempfile.TemporaryDirectory(prefix="shard-memory-") as tmp:
            landing, storage = Path(tmp, "landing"), Path(tmp, "storage")
            landing.mkdir()
            started = time.perf_counter()
            html_mb = build_shard(landing / f"shard-{records}.warc.gz", records, page_kb)
            print(f"{records} records, {html_mb:,.0f} MB of HTML (built in {time.perf_counter() - started:.0f} s)", flush=True)
            for stage in STAGES:
                figures = run_stage(stage, landing / f"shard-{records}.warc.gz", storage)
                rows.append({"stage": stage, "records": records, "html_mb": round(html_mb, 1), **figures})
                print(f"  {stage:<16} {figures['cpu_s']:>8.1f} CPU-s {figures['peak_rss_mib']:>7,} MiB peak RSS"
                      f"  ({figures['batches']} batches, {figures['documents_out']} documents out)", flush=True)
    print(json.dumps({"command": command_line(), "page_kb": page_kb, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
