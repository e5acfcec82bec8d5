"""Ingest: raw_shard reads one landing shard into documents, with non-documents dropped and unreadable
records quarantined."""
