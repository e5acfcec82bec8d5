"""Quality labels: read from JSONL, bad lines rejected with a reason, joined to documents, none lost."""

import json

import polars as pl

from lm_assets.corpus.quality.labels import files_version, match_labels, read_label_file


def jsonl(*rows) -> bytes:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows).encode()


DOCS = pl.DataFrame({
    "doc_id": ["a", "b", "c"],
    "url": ["https://x.example/a", "https://x.example/b", "https://x.example/c"],
    "source": ["s1.warc.gz", "s1.warc.gz", "s2.warc.gz"],
    "text": ["alpha text", "beta text", "gamma text"],
})


def test_label_lines_are_read_or_rejected_with_a_reason():
    labels, rejected = read_label_file(jsonl(
        {"url": "https://x.example/a", "label": "keep", "source": "human", "lang": "en"},
        {"doc_id": "b", "label": 1, "source": "tiny-llm", "confidence": "low"},
        {"doc_id": "c", "label": 4.0, "source": "tiny-llm"},
        {"url": "https://x.example/c", "label": None},
        "",
        "{not json",
        {"url": "https://x.example/a", "label": "MAYBE"},
        {"url": "https://x.example/a", "label": 7},
        {"label": "KEEP"},
        ["a list"],
    ), "team.jsonl")
    assert labels.select("line", "label", "keep", "source", "confidence").rows() == [
        (1, "KEEP", True, "human", "high"), (2, "1", False, "tiny-llm", "low"), (3, "4.0", True, "tiny-llm", "high"),
    ]
    assert [(r["line"], r["reason"].split(":")[0].split(" ")[0]) for r in rejected.iter_rows(named=True)] == [
        (6, "not"), (7, "label"), (8, "score"), (9, "names"), (10, "not"),
    ]
    _, bad_bytes = read_label_file(b"\xff\xfe", "broken.jsonl")
    assert "not UTF-8" in bad_bytes["reason"][0]


def test_labels_join_their_documents_and_unmatched_ones_are_reported():
    first, _ = read_label_file(jsonl(
        {"url": "https://x.example/a", "label": "DROP", "source": "tiny-llm"},
        {"url": "https://x.example/missing", "label": "KEEP", "source": "human"},
        {"doc_id": "zz", "label": "KEEP", "source": "human"},
        {"doc_id": "c", "label": "KEEP", "source": "human"},
    ), "1.jsonl")
    second, _ = read_label_file(jsonl(
        {"url": "https://x.example/a", "label": "KEEP", "source": "human"},
        {"doc_id": "c", "label": "DROP", "source": "tiny-llm"},
    ), "2.jsonl")
    examples, unmatched = match_labels(pl.concat([first, second]), DOCS)
    # A person's label beats a model's, whichever file is later.
    assert examples.select("doc_id", "keep", "file", "source", "text").rows() == [
        ("a", True, "2.jsonl", "human", "alpha text"), ("c", True, "1.jsonl", "human", "gamma text"),
    ]
    assert unmatched.select("file", "line", "url", "doc_id").rows() == [
        ("1.jsonl", 2, "https://x.example/missing", None), ("1.jsonl", 3, None, "zz"),
    ]


def test_a_new_or_edited_file_is_a_new_version():
    one = {"a.jsonl": b"x"}
    assert files_version(one) == files_version(dict(one))
    assert files_version(one) != files_version({**one, "b.jsonl": b"y"}) != files_version({"a.jsonl": b"z"})
