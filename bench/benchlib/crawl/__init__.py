"""Benchmark crawls: gzip WARC shards of real pages plus injected duplicates, and a `truth.json` of them.

- `html_edits`: editing an HTML page's text nodes (never its markup), and mirror notices;
- `copies`: exact and near copies of a page at new URLs, and their truth entries;
- `similarity`: the natural duplicates a set of pages already holds;
- `payloads`: the other responses a crawl carries (images, PDFs, 404s, redirects);
- `warc`: one shard writer;
- `debian`: pages from Debian documentation packages;
- `builder`: the whole crawl, which `bench/build_crawl.py` runs.
"""
