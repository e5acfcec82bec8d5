"""Rebuild the labelled real-web crawl (bench/web_set/) from the public repositories its pages come from.

Usage::

    .venv/bin/python scripts/build_web_crawl.py --repos DIR [--out DIR] [--docs-per-shard 100]

Every line of bench/web_set/labels.jsonl names its page's source: `repo` (owner/name on GitHub),
`commit` and `path` (and `transform: gunzip` where the repository stores it gzipped). The page is read byte for byte from a clone of that repository at that commit,
found under `--repos` as `<owner>+<name>/repo` or `<owner>+<name>` (a bare or working git directory;
`git clone https://github.com/<owner>/<name> DIR/<owner>+<name>` makes one). The pages are written as
WARC response records (status 200, `Content-Type: text/html` without a charset, so the reader finds
the page's own), in label order, `--docs-per-shard` to a shard, into `--out` (default `$OUT/web-crawl`,
else `bench/out/web-crawl`) with a `truth.json` that lists no duplicates, the shape of a
`bench/build_crawl.py` folder, so every bench reads it as it reads the others. The HTML is not in this
repository: it belongs to the sites and repositories it comes from (bench/web_set/README.md lists
their licences).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO / "bench" / "web_set" / "labels.jsonl"


def git_dir(repos: Path, name: str) -> Path:
    folder = name.replace("/", "+")
    for candidate in (repos / folder / "repo", repos / folder):
        if candidate.exists():
            return candidate
    raise SystemExit(f"no clone of {name} under {repos} (looked for {folder}/repo and {folder})")


def page_bytes(repos: Path, row: dict) -> bytes:
    found = subprocess.run(
        ["git", "-C", str(git_dir(repos, row["repo"])), "show", f"{row['commit']}:{row['path']}"],
        capture_output=True, check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"{row['repo']}@{row['commit'][:10]}:{row['path']}: {found.stderr.decode().strip()}")
    # A few sources store their pages gzipped; the label says so.
    return gzip.decompress(found.stdout) if row.get("transform") == "gunzip" else found.stdout


def write_shard(path: Path, pages: list[tuple[str, bytes]]) -> None:
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "lm-assets build_web_crawl.py"}))
        for url, body in pages:
            head = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=head))


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO / "bench"))
    from benchlib.paths import out_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder of clones, <owner>+<name>[/repo]")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--docs-per-shard", type=int, default=100)
    args = parser.parse_args(argv)
    out = args.out or out_dir("web-crawl")
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in args.labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    pages = [(row["url"], page_bytes(args.repos, row)) for row in rows]
    for old in out.glob("crawl-*.warc.gz"):
        old.unlink()
    for n, start in enumerate(range(0, len(pages), args.docs_per_shard)):
        write_shard(out / f"crawl-{n:05d}.warc.gz", pages[start:start + args.docs_per_shard])
    (out / "truth.json").write_text(json.dumps({"injected": [], "natural_duplicates": [], "natural_near_pairs": []}) + "\n")
    size = sum(len(body) for _, body in pages)
    print(f"{len(pages)} pages from {len({row['repo'] for row in rows})} repositories, {size / 1e6:.1f} MB of HTML "
          f"-> {out} ({-(-len(pages) // args.docs_per_shard)} shards)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
