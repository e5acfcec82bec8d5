"""Cross-shard deduplication: exact content hashes first, then MinHash-LSH near-duplicates.

The work is split into steps that each run in parallel or within a memory bound, with parquet-friendly
polars tables between them:

1. Per shard, in parallel: `sketch_documents` gives each document its content hash, keep-rule
   columns and MinHash signature (the "sketches"); `band_table` cuts signatures into LSH band
   hashes, one row per (doc_id, band).
2. `rank_documents` (DuckDB) puts all documents in keep-rule order and finds exact-duplicate groups:
   `rank` 0 is the best document, `exact_rank` the best rank among documents with the same content.
3. `candidate_edges` (DuckDB) groups band rows by (band, band_hash) into buckets and links every
   member of a bucket to the bucket's smallest doc_id: a star, so a bucket of k documents costs k - 1
   edges instead of k^2 / 2, and connectivity is unchanged. Buckets of different bands are
   independent, so the band axis can be split: `candidate_edges(bands, band_range=(lo, hi))` only
   reads bands lo <= band < hi, and the union of the edges over ranges that cover 0..bands is
   exactly the edge set of one unsplit run. Each range can be its own process or partition. DuckDB
   runs with `memory_limit` and spills to `temp_directory` (see `DuckDBConfig`).
4. `verify_edges` keeps an edge when the signature-estimated Jaccard similarity of its two documents
   (the fraction of equal MinHash values) reaches `verify_threshold`. With star edges a member is
   compared with its bucket's centre, not with every other member.
5. `cluster_documents` joins exact groups and verified edges with union-find and applies the keep
   rule, giving the clusters table for every input document.
6. Per shard: `apply_dedup` turns the clusters table into a `StageResult`.

`deduplicate` runs steps 1-5 in memory; `deduplicate_incremental` deduplicates new documents against
the persisted sketches, bands and clusters of earlier runs without touching their decisions.

Keep rule: a cluster keeps the copy that best represents it, not the longest one (a mirror's copy
is longer by its banner). Among its distinct texts (exact groups) that is the one with the highest
mean estimated similarity to the others, so a copy with an added header or footer, or with its own
edits, loses to the original they were all made from. A member less similar to that centre than the
verification threshold was only chained in through others and stays as its own cluster. Ties (a
pair of texts, and the copies of one text) go by the URL that looks canonical (`KEEP_ORDER`): no
query string, then the host with more documents in the corpus (a mirror holds few), then https, then
the shallower path; then the earliest `fetched_at` (ISO-8601 strings order correctly), then the
smallest doc_id; missing values sort last.

Clusters table (`CLUSTER_SCHEMA`), one row per document, singletons included: `doc_id`,
`cluster_id` (the doc_id of the cluster's kept document, so ids stay stable across incremental
runs), `cluster_size`, `kept`, `reason` (null when kept, else "exact_duplicate" when the text equals
the kept document's after normalisation, "near_duplicate" otherwise) and `kept_doc_id` (the
document's own id when kept).

Documents without any shingle (empty, or only punctuation) are never clustered: each stays a kept
singleton, and `empty` in the sketches flags them.
"""
