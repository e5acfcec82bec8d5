"""The labelled text set (bench/text_set): its labels, and how scripts/build_text_set.py reads each record."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from build_text_set import LABELS, document_url, record_text  # noqa: E402


def test_the_labels_are_at_least_400_texts_half_chinese_from_several_sources():
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 400 and len({row["id"] for row in rows}) == len(rows)
    langs = Counter(row["lang"] for row in rows)
    assert set(langs) == {"en", "zh"} and langs["zh"] >= len(rows) / 2
    assert len({row["repo"] for row in rows}) >= 3
    for row in rows:
        assert row["label"] in ("KEEP", "DROP") and row["confidence"] in ("high", "low"), row["id"]
        assert len(row["commit"]) == 40 and row["locator"]["kind"] == "line" and row["format"] in ("jsonl", "txt")
        assert len(row["reason"].split()) <= 15, row["id"]
    # Both labels in each language, so every source-out fold is scored on both.
    assert {(row["lang"], row["label"]) for row in rows} == {("en", "KEEP"), ("en", "DROP"), ("zh", "KEEP"), ("zh", "DROP")}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_a_record_is_read_from_its_commit_by_line_field_and_gzip(tmp_path):
    clone = tmp_path / "repos" / "owner+corpus"
    clone.mkdir(parents=True)
    git("init", "-q", cwd=clone)
    records = [{"text": "第一篇文章。", "url": "https://a.example/1"}, {"text": "Second text.\nTwo lines."}]
    (clone / "data.jsonl.gz").write_bytes(gzip.compress("\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode()))
    (clone / "lines.txt").write_text("one passage\nanother passage\n", encoding="utf-8")
    git("add", ".", cwd=clone)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data", cwd=clone)
    commit = git("rev-parse", "HEAD", cwd=clone)
    (clone / "lines.txt").write_text("changed after the commit\n", encoding="utf-8")  # the commit is what is read
    row = {"id": "owner/corpus:data.jsonl.gz:1", "repo": "owner/corpus", "commit": commit, "path": "data.jsonl.gz",
           "transform": "gunzip", "format": "jsonl", "locator": {"kind": "line", "index": 1, "field": "text"}, "url": None}
    cache: dict = {}
    assert record_text(tmp_path / "repos", row, cache) == "Second text.\nTwo lines."
    txt = {**row, "path": "lines.txt", "transform": None, "format": "txt", "locator": {"kind": "line", "index": 1, "field": None}}
    assert record_text(tmp_path / "repos", txt, cache) == "another passage"
    # A text without a URL gets one without a path, the same every time; one with a URL keeps it.
    assert document_url(row) == document_url(dict(row)) and document_url(row).startswith("text-set:")
    assert "/" not in document_url(row) and document_url({**row, "url": "https://a.example/1"}) == "https://a.example/1"
    with pytest.raises(SystemExit, match="cannot read a csv record"):
        record_text(tmp_path / "repos", {**row, "format": "csv"}, cache)
