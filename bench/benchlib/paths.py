"""Where the benches write, and the tiny crawl of their `--smoke` runs.

Every bench writes under one output folder: `$OUT` when it is set, else `bench/out/` (ignored by
git). Nothing else in the repository is written unless a command line names it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# 50 labelled pages of the development crawl (bench/dev_set/README.md), shipped for the tests.
TEST_SLICE = REPO / "tests" / "data" / "dev-slice"


def out_dir(*parts: str) -> Path:
    """`$OUT/<parts>`, else `bench/out/<parts>`, as an absolute path (not created)."""
    root = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "bench" / "out"
    return root.absolute().joinpath(*parts)


def write_report(name: str, report: dict) -> Path:
    """The bench's figures as JSON in `out_dir(name)`, and as the last line printed."""
    out = out_dir(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return out


def smoke_crawl() -> Path:
    """The crawl of `--smoke` runs, built offline in `out_dir("smoke-crawl")`: the test slice's pages as
    the one shard of a crawl folder, with a `truth.json` that lists no duplicates."""
    crawl = out_dir("smoke-crawl")
    crawl.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEST_SLICE / "slice.warc.gz", crawl / "crawl-00000.warc.gz")
    truth = {"injected": [], "natural_duplicates": [], "natural_near_pairs": []}
    (crawl / "truth.json").write_text(json.dumps(truth) + "\n")
    return crawl


def command_line() -> str:
    executable = Path(sys.executable)
    try:
        executable = executable.relative_to(REPO)
    except ValueError:
        pass
    return shlex.join([str(executable), *sys.argv])
