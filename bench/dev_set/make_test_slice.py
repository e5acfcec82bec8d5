"""Write the slice of the labelled development set that `tests/test_curation_quality.py` scores.

Usage::

    .venv/bin/python bench/dev_set/make_test_slice.py [--crawl bench/out/dev-crawl] [--out tests/data/dev-slice]

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
REPO = HERE.parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, default=REPO / "bench" / "out" / "dev-crawl")
    parser.add_argument("--labels", type=Path, default=HERE / "labels.jsonl")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "dev-slice")
    parser.add_argument("--keep", type=int, default=30)
    parser.add_argument("--drop", type=int, default=20)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args(argv)

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
