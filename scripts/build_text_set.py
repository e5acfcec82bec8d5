"""Rebuild the labelled text set (bench/text_set/) from the public repositories its texts come from.

Usage::

    .venv/bin/python scripts/build_text_set.py --repos DIR [--out DIR]

Every line of bench/text_set/labels.jsonl names its text's source: `repo` (owner/name on GitHub), `commit`,
`path` (with `transform: gunzip` where the file is gzipped), the file's `format` (`jsonl` or `txt`) and a
`locator`: the 0-based line of the record and, for JSON Lines, the `field` that holds the text. The text is
read from a clone of that repository at that commit, found under `--repos` as `<owner>+<name>/repo` or
`<owner>+<name>` (a bare or working git directory). The texts are written as one JSON Lines shard,
`texts.jsonl`, one document a line (`url`, `text`), in label order: what a corpus that others extracted
hands the pipeline. A record without a URL of its own gets `text-set:` and a hash of its id. The
texts are not in this repository: they belong to the repositories they come from
(bench/text_set/README.md lists their licences).
"""

from __future__ import annotations

import argparse
import hashlib
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO / "bench" / "text_set" / "labels.jsonl"
sys.path.insert(0, str(REPO / "scripts"))

from build_web_crawl import git_dir  # noqa: E402


def document_url(row: dict) -> str:
    """The URL a labelled text is read and joined by: its own, else one made of its id, with no path, so that
    its address signals are those of a document without a URL."""
    return row.get("url") or "text-set:" + hashlib.sha256(row["id"].encode()).hexdigest()[:16]


def file_lines(repos: Path, row: dict, cache: dict) -> list[str]:
    key = (row["repo"], row["commit"], row["path"])
    if key not in cache:
        found = subprocess.run(
            ["git", "-C", str(git_dir(repos, row["repo"])), "show", f"{row['commit']}:{row['path']}"],
            capture_output=True, check=False,
        )
        if found.returncode != 0:
            raise SystemExit(f"{row['repo']}@{row['commit'][:10]}:{row['path']}: {found.stderr.decode().strip()}")
        data = gzip.decompress(found.stdout) if row.get("transform") == "gunzip" else found.stdout
        cache[key] = data.decode("utf-8").split("\n")
    return cache[key]


def record_text(repos: Path, row: dict, cache: dict) -> str:
    locator = row["locator"]
    if locator["kind"] != "line" or row["format"] not in ("jsonl", "txt"):
        raise SystemExit(f"{row['id']}: cannot read a {row['format']} record by {locator['kind']}")
    line = file_lines(repos, row, cache)[locator["index"]]
    return json.loads(line)[locator["field"]] if row["format"] == "jsonl" else line


def main(argv=None) -> int:
    from benchlib.paths import out_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, default=os.environ.get("LM_ASSETS_TEXT_REPOS"),
                        help="folder of clones, <owner>+<name> each (default $LM_ASSETS_TEXT_REPOS)")
    parser.add_argument("--out", type=Path, default=None, help="default $OUT/text-set, else bench/out/text-set")
    args = parser.parse_args(argv)
    if args.repos is None:
        parser.error("--repos (or $LM_ASSETS_TEXT_REPOS) is needed: a folder of clones of the source repositories")
    out = args.out or out_dir("text-set")
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    cache: dict = {}
    with (out / "texts.jsonl.tmp").open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"url": document_url(row), "text": record_text(args.repos, row, cache)},
                                    ensure_ascii=False) + "\n")
    (out / "texts.jsonl.tmp").replace(out / "texts.jsonl")
    print(f"{len(rows)} texts of {len({r['repo'] for r in rows})} repositories written to {out / 'texts.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "bench"))
    sys.exit(main())
