"""Cross-shard dedup: per-shard MinHash sketches, global clusters (exact, then MinHash-LSH), per-shard decisions."""

import hashlib
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from lm_assets.corpus.dedup.config import CLUSTER_SCHEMA, DEDUPLICATED, DedupConfig
from lm_assets.corpus.dedup.decisions import apply_dedup
from lm_assets.corpus.dedup.global_dedup import band_range_edges, cluster_files, cluster_report, merge_cluster_files
from lm_assets.corpus.dedup.incremental import DedupState, deduplicate_incremental
from lm_assets.corpus.dedup.minhash import lsh_params
from lm_assets.corpus.dedup.planning import plan, plan_digest
from lm_assets.corpus.dedup.ranking import band_ranges
from lm_assets.corpus.dedup.sketches import band_table, sketch_documents
from lm_assets.defs.common.config import to_dataclass
from lm_assets.defs.common.environment import from_environment, unset_means
from lm_assets.defs.common.partitions import (
    add_new_partitions,
    band_partition_key,
    band_partitions,
    parse_band_partition_key,
    shard_asset,
    shard_partitions,
    shards_with,
)
from lm_assets.defs.common.reporting import (
    markdown_table,
    shard_check_spec,
)
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.stages import CURATED_SCHEMA, DocumentStage, each_shard
from lm_assets.storage.layout import CLUSTERS_KEY, INDEX_KEY, band_edges_keys, minhash_keys, stage_folder, stage_keys

DEDUP_DEFAULTS = DedupConfig()
# The MinHash settings the resource exposes, in the order the sketch fingerprint hashes them.
MINHASH_FIELDS = ("num_perm", "seed", "threshold", "word_ngram", "char_ngram")

SYSTEM_TEMP = "a folder in the system temp directory"

class DedupSettings(dg.ConfigurableResource):
    """MinHash-LSH settings shared by the sketches and the clusters, so the two always agree."""

    num_perm: int = Field(
        default=DEDUP_DEFAULTS.minhash.num_perm, description="MinHash permutations: values in each document's signature"
    )
    seed: int = Field(default=DEDUP_DEFAULTS.minhash.seed, description="seed of the MinHash permutations")
    threshold: float = Field(
        default=DEDUP_DEFAULTS.minhash.threshold,
        description="Jaccard similarity (0-1) of near-duplicates; the LSH bands and rows are chosen for it",
    )
    word_ngram: int = Field(
        default=DEDUP_DEFAULTS.minhash.word_ngram,
        description="shingle length in words, for documents other than zh/ja/ko",
    )
    char_ngram: int = Field(
        default=DEDUP_DEFAULTS.minhash.char_ngram, description="shingle length in characters, for zh/ja/ko documents"
    )
    verify: bool = Field(
        default=DEDUP_DEFAULTS.verify,
        description="check each LSH candidate pair's signature similarity before linking it; off: every candidate "
        "pair is a duplicate",
    )
    verify_margin: float = Field(
        default=DEDUP_DEFAULTS.verify_margin,
        description="a candidate pair is linked when its estimated similarity reaches threshold minus this margin",
    )
    duckdb_memory_limit: str = Field(
        default=DEDUP_DEFAULTS.duckdb.memory_limit,
        description="DuckDB's memory limit for the band join and ranking (e.g. 2GB); beyond it DuckDB spills to disk",
    )
    duckdb_temp_directory: str | None = Field(
        default=DEDUP_DEFAULTS.duckdb.temp_directory,
        description="where DuckDB spills; " + unset_means(
            "LM_ASSETS_DUCKDB_TEMP_DIR", SYSTEM_TEMP,
            lambda used: f"a folder in {tempfile.gettempdir()}" if used == SYSTEM_TEMP else used),
    )
    # The assets' own, not a DedupConfig field.
    band_parts: int = Field(
        default=4,
        description="the LSH bands are split into this many ranges, each a partition of dedup_edges (its own run "
        "and pod); minhash_signatures registers the ranges of these settings as dedup_bands partitions",
    )
    components: str = Field(
        default="union_find",
        description="connected components of the verified edges: union_find (a memory-mapped parent array, 4 bytes "
        "per document) or star (large-star/small-star rounds in DuckDB)",
    )

    def dedup_config(self) -> DedupConfig:
        temp_directory = from_environment(self.duckdb_temp_directory or None, "LM_ASSETS_DUCKDB_TEMP_DIR")
        return to_dataclass(DedupConfig, {
            "minhash": {name: getattr(self, name) for name in MINHASH_FIELDS},
            "verify": self.verify,
            "verify_margin": self.verify_margin,
            "duckdb": {"memory_limit": self.duckdb_memory_limit, "temp_directory": temp_directory},
        })

    def band_ranges(self) -> list[tuple[int, int]]:
        return band_ranges(lsh_params(self.dedup_config().minhash)[0], self.band_parts)

    def band_keys(self) -> list[str]:
        """The `dedup_bands` partition keys of these settings."""
        return [band_partition_key(r) for r in self.band_ranges()]

    def sketch_fingerprint(self) -> str:
        """What sketches and bands depend on: a change means every shard needs new sketches."""
        payload = json.dumps([getattr(self, name) for name in MINHASH_FIELDS])
        return hashlib.sha256(payload.encode()).hexdigest()[:12]




def content_digest(sketches: pl.DataFrame) -> str:
    """Changes exactly when the shard's documents or their texts change."""
    digest = hashlib.sha256()
    for doc_id, content in sketches.select("doc_id", "content_hash").iter_rows():
        digest.update(f"{doc_id}:{content};".encode())
    return digest.hexdigest()[:16]


# minhash_signatures ------------------------------------------------------------------------------
@shard_asset(
    group_name="dedup",
    kinds={"numpy", "datasketch", "parquet"},
    deps=["curated_shard"],
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=[
        shard_check_spec(
            "one_sketch_per_document", "minhash_signatures", "Every curated document has exactly one sketch.",
            blocking=True,
        )
    ],
    description="Per document: normalized content hash and MinHash signature (vectorised, equal to datasketch's); "
    "per LSH band: its hash.",
)
def minhash_signatures(context: dg.AssetExecutionContext, storage: StorageResource, dedup: DedupSettings):
    yield from each_shard(context, lambda shard: minhash_signatures_of(shard, context.instance, storage, dedup))


def minhash_signatures_of(
    shard: str, instance: dg.DagsterInstance, storage: StorageResource, dedup: DedupSettings
) -> dg.MaterializeResult:
    store = storage.storage()
    docs = store.read_parquet(stage_keys("curated", shard)["documents"])
    config = dedup.dedup_config()
    started = time.perf_counter()
    sketches = sketch_documents(docs, config).with_columns(pl.lit(shard).alias("source"), docs["lang"].alias("lang"))
    bands = band_table(sketches, config)
    seconds = time.perf_counter() - started
    keys = minhash_keys(shard)
    fingerprint = dedup.sketch_fingerprint()
    info = {"fingerprint": fingerprint, "documents": docs.height, "digest": content_digest(sketches)}
    store.publish(stage_folder("minhash", shard), {"sketches.parquet": sketches, "bands.parquet": bands, "info.json": json.dumps(info).encode()})
    add_new_partitions(instance, band_partitions, dedup.band_keys())
    n_bands, rows = lsh_params(config.minhash)
    ids_match = sketches["doc_id"].n_unique() == sketches.height == docs.height
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(keys["sketches"])),
            "documents": docs.height,
            "empty_documents": int(sketches["empty"].sum()),
            "num_perm": config.minhash.num_perm,
            "bands_x_rows": f"{n_bands} x {rows}",
            "threshold": config.minhash.threshold,
            "docs_per_second": round(docs.height / seconds, 1) if seconds else 0.0,
            "sketch_fingerprint": fingerprint,
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="one_sketch_per_document", passed=ids_match,
                metadata={"documents": docs.height, "sketches": sketches.height},
            )
        ],
    )


# dedup_edges, dedup_clusters --------------------------------------------------------------------
class DedupPlanConfig(dg.Config):
    full_rebuild: bool = Field(
        default=False,
        description="cluster every sketched shard again; off: only new shards are matched against the index, unless "
        "the MinHash settings or a shard's sketches changed. Give dedup_edges and dedup_clusters the same value.",
    )


def sketched_shards(instance: dg.DagsterInstance, store, fingerprint: str) -> dict[str, str]:
    """Known shards with sketches: shard -> digest of its documents."""
    out = {}
    for shard in shards_with(instance, store, lambda s: minhash_keys(s)["info"]):
        info = json.loads(store.read_bytes(minhash_keys(shard)["info"]))
        if info["fingerprint"] != fingerprint:
            raise dg.Failure(
                f"sketches of {shard} were made with other MinHash settings; re-materialize minhash_signatures for it"
            )
        out[shard] = info["digest"]
    return out


class DedupPlan:
    """What this round of dedup covers, as dedup_edges and dedup_clusters both work it out from storage."""

    def __init__(self, instance: dg.DagsterInstance, store, dedup: DedupSettings, full_rebuild: bool):
        self.fingerprint = dedup.sketch_fingerprint()
        self.available = sketched_shards(instance, store, self.fingerprint)
        self.index = json.loads(store.read_bytes(INDEX_KEY)) if store.exists(INDEX_KEY) else None
        self.mode, self.shards = plan(self.index, self.available, self.fingerprint, full_rebuild)
        self.full = self.mode.startswith("full")
        self.earlier = [] if self.full else sorted(self.index["shards"])

    @property
    def digest(self) -> str:
        """Equal for two runs exactly when they dedup the same shards the same way."""
        return plan_digest(self.full, self.shards, self.available, self.fingerprint)


def minhash_files(stack: ExitStack, store, shards: list[str], table: str) -> list[str]:
    """Local paths of the shards' sketches or bands (downloaded for the run when the storage is S3)."""
    if not shards:
        return []
    names = [f"{shard}/{table}.parquet" for shard in shards]
    folder = stack.enter_context(store.local_dir("minhash", names))
    return [str(folder / name) for name in names]


@dg.asset(
    partitions_def=band_partitions,
    group_name="dedup",
    kinds={"duckdb", "parquet"},
    deps=[dg.AssetDep(minhash_signatures, partition_mapping=dg.AllPartitionMapping())],
    automation_condition=dg.AutomationCondition.eager(),
    description="Per LSH band range: candidate pairs of documents sharing a band bucket, verified by their signature "
    "similarity, streamed through DuckDB under its memory limit. Each range is its own run; dedup_clusters reads "
    "them all. New shards are matched against the bands of earlier ones.",
)
def dedup_edges(
    context: dg.AssetExecutionContext, config: DedupPlanConfig, storage: StorageResource, dedup: DedupSettings
) -> dg.MaterializeResult:
    store = storage.storage()
    round_ = DedupPlan(context.instance, store, dedup, config.full_rebuild)
    band_range = parse_band_partition_key(context.partition_key)
    if band_range not in dedup.band_ranges():
        raise dg.Failure(
            f"{context.partition_key} is not a band range of the dedup resource's settings "
            f"({', '.join(dedup.band_keys())}): it was registered under other settings"
        )
    cfg = dedup.dedup_config()
    keys = band_edges_keys(context.partition_key)
    started = time.perf_counter()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dedup-edges-")))
        out = work / "edges.parquet"
        sketches, bands = (minhash_files(stack, store, round_.shards, t) for t in ("sketches", "bands"))
        if not round_.shards:
            pl.DataFrame(schema={"doc_a": pl.String, "doc_b": pl.String, "similarity": pl.Float64}).write_parquet(out)
            stats = {"candidate_edges": 0, "verified_edges": 0}
        elif round_.full:
            stats = band_range_edges(bands, sketches, band_range, out, cfg)
        else:
            stats = band_range_edges(
                bands, sketches, band_range, out, cfg,
                old_bands=minhash_files(stack, store, round_.earlier, "bands"),
                old_sketches=minhash_files(stack, store, round_.earlier, "sketches"),
            )
        store.put_file(keys["edges"], out)
    seconds = time.perf_counter() - started
    info = {"plan": round_.digest, "mode": round_.mode, "band_range": list(band_range), **stats}
    store.write_bytes(keys["info"], json.dumps(info, indent=1).encode())
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(keys["edges"])),
            "mode": round_.mode,
            "shards_processed": len(round_.shards),
            "candidate_edges": stats["candidate_edges"],
            "verified_edges": stats["verified_edges"],
            "seconds": round(seconds, 3),
        }
    )


def edge_files_of(store, round_: DedupPlan, dedup: DedupSettings) -> list[str]:
    """The edge-file keys of every band range of the settings, refused unless each was made for this round."""
    keys, stale = [], []
    for band_key in dedup.band_keys():
        info_key = band_edges_keys(band_key)["info"]
        info = json.loads(store.read_bytes(info_key)) if store.exists(info_key) else None
        if info is None or info["plan"] != round_.digest:
            stale.append(band_key)
        keys.append(band_edges_keys(band_key)["edges"])
    if stale:
        raise dg.Failure(
            f"the verified edges of {', '.join(stale)} are missing or were made for other shards or settings: "
            "materialize dedup_edges for every band range, then dedup_clusters"
        )
    return keys


@dg.asset(
    group_name="dedup",
    kinds={"duckdb", "polars"},
    deps=[dedup_edges, minhash_signatures],
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=[
        dg.AssetCheckSpec(
            "clusters_consistent", asset="dedup_clusters", blocking=True,
            description="Every sketched document is in exactly one cluster, and each cluster keeps exactly one.",
        ),
        dg.AssetCheckSpec(
            "no_exact_duplicates_kept", asset="dedup_clusters", blocking=True,
            description="No two kept documents share a normalized-content hash.",
        ),
    ],
    description="Clusters of duplicate documents across all shards (exact hash, then the verified edges of every band "
    "range, connected components out of core) and which document each cluster keeps. New shards are deduplicated "
    "against the persisted index of earlier ones; earlier decisions never change.",
)
def dedup_clusters(
    context: dg.AssetExecutionContext, config: DedupPlanConfig, storage: StorageResource, dedup: DedupSettings
) -> dg.MaterializeResult:
    store = storage.storage()
    round_ = DedupPlan(context.instance, store, dedup, config.full_rebuild)
    mode, shards, available = round_.mode, round_.shards, round_.available
    cfg = dedup.dedup_config()
    started = time.perf_counter()
    if shards or round_.full:
        edge_keys = edge_files_of(store, round_, dedup)
    if round_.full and shards:
        with ExitStack() as stack:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dedup-clusters-")))
            edges = [str(stack.enter_context(store.local_copy(key))) for key in edge_keys]
            sketches = minhash_files(stack, store, shards, "sketches")
            run = cluster_files(sketches, edges, work / "clusters.parquet", work, cfg, algorithm=dedup.components)
            store.put_file(CLUSTERS_KEY, run.clusters)
    elif round_.full:
        store.write_parquet(CLUSTERS_KEY, pl.DataFrame(schema=CLUSTER_SCHEMA))
    elif shards:
        with ExitStack() as stack:
            old_clusters = stack.enter_context(store.local_copy(CLUSTERS_KEY))
            state = DedupState(
                sketches=minhash_files(stack, store, round_.earlier, "sketches"),
                bands=minhash_files(stack, store, round_.earlier, "bands"),
                clusters=old_clusters,
            )
            edges = [str(stack.enter_context(store.local_copy(key))) for key in edge_keys]
            new_sketches = minhash_files(stack, store, shards, "sketches")
            result = deduplicate_incremental(new_sketches, None, state, cfg, edges=edges)
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dedup-clusters-")))
            merge_cluster_files(old_clusters, result.clusters.cast(CLUSTER_SCHEMA), work / "clusters.parquet", cfg)
            store.put_file(CLUSTERS_KEY, work / "clusters.parquet")
    seconds = time.perf_counter() - started
    store.write_bytes(INDEX_KEY, json.dumps({"fingerprint": round_.fingerprint, "shards": available}, indent=1).encode())

    with ExitStack() as stack:
        clusters_file = str(stack.enter_context(store.local_copy(CLUSTERS_KEY)))
        sketches = minhash_files(stack, store, sorted(available), "sketches") or None
        report = cluster_report(clusters_file, sketches, cfg)
    unsketched = [s for s in context.instance.get_dynamic_partitions(shard_partitions.name) if s not in available]
    if unsketched:
        context.log.warning(
            f"clustered {len(available)} shards; {len(unsketched)} registered shards have no sketches yet and are left "
            f"out: {', '.join(unsketched[:10])}{' …' if len(unsketched) > 10 else ''}. Materialize minhash_signatures "
            "for them, then dedup_edges and dedup_clusters again."
        )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(CLUSTERS_KEY)),
            "mode": mode,
            "shards_processed": dg.MetadataValue.json(shards),
            "shards_in_index": len(available),
            "shards_registered_without_sketches": dg.MetadataValue.json(unsketched),
            **cluster_metadata(report),
            "seconds": round(seconds, 3),
            "threshold": cfg.minhash.threshold,
            "verify_threshold": cfg.effective_verify_threshold,
            "components": dedup.components,
        },
        check_results=cluster_checks(report),
    )


def cluster_metadata(report: dict) -> dict:
    histogram = report["cluster_size_histogram"]
    meta = {
        "documents": report["documents"],
        "kept": report["kept"],
        "exact_duplicates": report["exact_duplicates"],
        "near_duplicates": report["near_duplicates"],
        "dup_rate": round(report["dup_rate"], 4),
        "cluster_size_histogram": markdown_table(
            pl.DataFrame({"cluster_size": list(histogram), "clusters": list(histogram.values())})
        ),
    }
    if "per_shard" not in report:
        return meta
    return meta | {"dup_rate_per_shard": markdown_table(report["per_shard"]), "largest_clusters": markdown_table(report["largest"])}


def cluster_checks(report: dict) -> list[dg.AssetCheckResult]:
    problems = report["problems"]
    shared = report.get("kept_sharing_a_hash", 0)
    return [
        dg.AssetCheckResult(
            check_name="clusters_consistent", passed=not any(problems.values()),
            metadata={k: int(v) for k, v in problems.items()},
        ),
        dg.AssetCheckResult(check_name="no_exact_duplicates_kept", passed=shared == 0, metadata={"kept_sharing_a_hash": shared}),
    ]


# deduplicated_shard ----------------------------------------------------------------------------
DEDUPLICATED_STAGE = DocumentStage(DEDUPLICATED, CURATED_SCHEMA)


@shard_asset(
    group_name="dedup",
    kinds={"polars", "parquet"},
    deps=["curated_shard", dedup_clusters],
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=DEDUPLICATED_STAGE.check_specs(),
    description="The shard's curated documents that their cluster keeps; removed ones are in the dropped table "
    "with their reason and the doc_id of the document kept instead.",
)
def deduplicated_shard(context: dg.AssetExecutionContext, storage: StorageResource):
    yield from each_shard(context, lambda shard: deduplicated_shard_of(shard, storage))


def deduplicated_shard_of(shard: str, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.storage()
    docs = store.read_parquet(stage_keys("curated", shard)["documents"])
    if not store.exists(CLUSTERS_KEY):
        raise dg.Failure("no dedup clusters yet: materialize dedup_clusters after minhash_signatures")
    clusters = store.scan_parquet(CLUSTERS_KEY)
    shard_clusters = clusters.filter(pl.col("doc_id").is_in(docs["doc_id"].implode())).collect()
    try:
        result = apply_dedup(docs, shard_clusters)
    except ValueError as exc:
        raise dg.Failure(f"{exc}: materialize dedup_clusters after this shard's minhash_signatures") from exc
    return DEDUPLICATED_STAGE.close(
        store, shard, docs.height, result,
        metadata={
            "exact_duplicates": result.stats["exact_duplicates"],
            "near_duplicates": result.stats["near_duplicates"],
            "dup_rate": round(1 - result.kept.height / docs.height, 4) if docs.height else 0.0,
            "removed_sample": markdown_table(result.dropped.head(10)),
        },
    )
