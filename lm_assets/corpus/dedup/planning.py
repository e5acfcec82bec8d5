"""What a round of dedup covers: every sketched shard again, or only the new ones against the index of
earlier rounds; and a digest that the edges of a band range and the clusters agree on."""

from __future__ import annotations

import hashlib
import json


def plan(index: dict | None, available: dict[str, str], fingerprint: str, full_rebuild: bool) -> tuple[str, list[str]]:
    """`("full", all shards)` or `("incremental", new shards)`, and why a full run was needed."""
    if full_rebuild:
        return "full: requested", sorted(available)
    if index is None:
        return "full: no earlier index", sorted(available)
    if index["fingerprint"] != fingerprint:
        return "full: MinHash settings changed", sorted(available)
    changed = sorted(s for s, digest in index["shards"].items() if available.get(s) != digest)
    if changed:
        return f"full: sketches changed for {', '.join(changed[:5])}", sorted(available)
    return "incremental", sorted(set(available) - set(index["shards"]))


def plan_digest(full: bool, shards: list[str], available: dict[str, str], fingerprint: str) -> str:
    """Equal for two rounds exactly when they dedup the same shards the same way."""
    payload = [full, shards, available, fingerprint]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
