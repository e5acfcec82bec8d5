"""Reading shards: WARC, WET, JSONL and Parquet into documents."""
