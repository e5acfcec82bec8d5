"""Write the slice of the labelled development set that `tests/corpus/audit/test_agreement.py` scores.

Usage::

    .venv/bin/python bench/dev_set/make_test_slice.py --out tests/data/dev-slice [--crawl DIR]
    .venv/bin/python bench/dev_set/make_test_slice.py --smoke

`--crawl` defaults to the development crawl the benches build (`$OUT/dev-crawl`, else
`bench/out/dev-crawl`) and `--out` to `$OUT/dev-slice` (else `bench/out/dev-slice`): name
`tests/data/dev-slice` to refresh the slice the tests read. `--smoke` takes its pages from the test
slice itself (`benchlib.paths.smoke_crawl`), offline, and so writes the same pages and labels again.

A seeded sample of the labelled pages (`--keep` KEEP and `--drop` DROP pages, spread over the
packages as the labels are), copied as they stand in the crawl's WARC records into one WARC.gz, with
their labels. The pages come from Debian documentation packages under free licences; the crawl's
manifest names them and their versions (bench/dev_set/README.md).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from pathlib import Path

from fastwarc.warc import ArchiveIterator, WarcRecordType
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchlib.paths import out_dir, smoke_crawl  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, default=out_dir("dev-crawl"))
    parser.add_argument("--labels", type=Path, default=HERE / "labels.jsonl")
    parser.add_argument("--out", type=Path, default=out_dir("dev-slice"))
    parser.add_argument("--smoke", action="store_true", help="offline: take the pages from the test slice itself")
    parser.add_argument("--keep", type=int, default=30)
    parser.add_argument("--drop", type=int, default=20)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args(argv)
    if args.smoke:
        args.crawl = smoke_crawl()

    labels = [json.loads(line) for line in args.labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(args.seed)
    chosen = []
    for label, count in (("KEEP", args.keep), ("DROP", args.drop)):
        pool = sorted((row for row in labels if row["label"] == label), key=lambda row: row["url"])
        chosen += rng.sample(pool, count)
    wanted = {row["url"] for row in chosen}

    args.out.mkdir(parents=True, exist_ok=True)
    found = set()
    with open(args.out / "slice.warc.gz", "wb") as stream:
        writer = WARCWriter(stream, gzip=True)
        for shard in sorted(args.crawl.glob("crawl-*.warc.gz")):
            with open(shard, "rb") as source:
                for record in ArchiveIterator(source, record_types=WarcRecordType.response):
                    url = record.headers.get("WARC-Target-URI")
                    if url not in wanted or url in found:
                        continue
                    found.add(url)
                    body = record.reader.read()
                    http = StatusAndHeaders(
                        "200 OK", [("Content-Type", record.http_headers.get("Content-Type"))], protocol="HTTP/1.1"
                    )
                    writer.write_record(writer.create_warc_record(
                        url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http,
                        warc_headers_dict={"WARC-Date": record.headers.get("WARC-Date")},
                    ))
    missing = wanted - found
    if missing:
        print(f"not in the crawl: {sorted(missing)[:5]}", file=sys.stderr)
        return 2
    with open(args.out / "labels.jsonl", "w", encoding="utf-8") as out:
        for row in sorted(chosen, key=lambda row: row["url"]):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(found)} pages ({args.keep} KEEP, {args.drop} DROP) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
