"""Benchmark crawls: gzip WARC shards of real pages plus injected duplicates, and a `truth.json` of them. The
sample crawl (`scripts/build_sample_crawl.py`) is written with `debian`, `payloads`, `similarity` and `warc` too.

- `html_edits`: editing an HTML page's text nodes (never its markup), and mirror notices;
- `copies`: exact and near copies of a page at new URLs, and their truth entries;
- `similarity`: shingles, Jaccard, and the natural duplicates a set of pages already holds;
- `payloads`: the other responses a crawl carries (images, PDFs, 404s, redirects);
- `warc`: one shard writer;
- `debian`: Debian documentation packages, fetched with apt-get, and their pages;
- `builder`: the whole crawl, which `bench/build_crawl.py` runs.
"""
