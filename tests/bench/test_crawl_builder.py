"""The benches' crawl builder (bench/benchlib/crawl), on a site folder of the sample crawl's pages."""

from __future__ import annotations

import json
import random
from itertools import combinations

import pytest
from benchlib.crawl.builder import CrawlSpec, Site, build_crawl, crawl_digest
from benchlib.crawl.debian import host, site_pages
from benchlib.crawl.html_edits import split_markup
from benchlib.crawl.similarity import similar_pairs

from lm_assets.corpus.ingest.readers import read_shard
from tests.support.dedup_crawl import SAMPLE_CRAWL


@pytest.fixture(scope="module")
def site_folder(tmp_path_factory):
    """The sample crawl's HTML pages as the files of one site, in sub-folders."""
    folder = tmp_path_factory.mktemp("site")
    pages = []
    for shard in sorted(SAMPLE_CRAWL.glob("crawl-*.warc.gz")):
        pages += [html for html in read_shard(shard).documents["html"] if html is not None]
    for index, html in enumerate(pages):
        path = folder / "docs" / f"part-{index % 3}" / f"page-{index:03d}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    (folder / "docs" / "link.html").symlink_to(folder / "docs" / "part-0" / "page-000.html")
    return folder


def site(folder) -> Site:
    _, pages, images = site_pages("sample-docs", folder)
    return Site("sample-docs", tuple(pages), tuple(images))


def crawl_records(out) -> dict[str, dict]:
    rows = {}
    for shard in sorted(out.glob("crawl-*.warc.gz")):
        read = read_shard(shard)
        for row in read.documents.select("url", "html").iter_rows(named=True):
            rows[row["url"]] = row | {"shard": shard.name}
    return rows


def test_similar_pairs_finds_exactly_the_pairs_brute_force_finds():
    rng = random.Random(3)
    base = [set(rng.sample(range(60), rng.randint(5, 30))) for _ in range(25)]
    sets = base + [set(list(s)[: max(1, len(s) - rng.randint(0, 4))]) | {rng.randrange(60)} for s in base]
    kinds = [i % 2 for i in range(len(base))] * 2
    brute = sorted(
        (i, j, len(sets[i] & sets[j]) / len(sets[i] | sets[j]))
        for i, j in combinations(range(len(sets)), 2)
        if kinds[i] == kinds[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= 0.4
    )
    found = similar_pairs(sets, kinds, 0.4)
    assert [(i, j) for i, j, _ in found] == [(i, j) for i, j, _ in brute]
    assert [round(x, 9) for *_, x in found] == [round(x, 9) for *_, x in brute]
    assert len(found) > 10


def test_site_pages_are_the_regular_html_files_under_the_common_root(site_folder):
    root, pages, _ = site_pages("sample-docs", site_folder)
    assert root == site_folder / "docs"
    assert all(page.url.startswith(f"https://{host('sample-docs')}/part-") for page in pages)
    assert not any(page.url.endswith("link.html") for page in pages)  # symlinks are not pages
    assert [page.file for page in pages] == sorted(page.file for page in pages)


def test_crawl_holds_every_page_and_its_known_copies(site_folder, tmp_path):
    spec = CrawlSpec(seed=5, docs_per_shard=40, exact_fraction=0.1, near_fraction=0.2)
    manifest = build_crawl(tmp_path, [site(site_folder)], spec)
    truth = json.loads((tmp_path / "truth.json").read_text())
    records = crawl_records(tmp_path)
    source = {page.url: page.file.read_bytes() for page in site(site_folder).pages}

    injected = truth["injected"]
    exact = [entry for entry in injected if entry["kind"] == "exact"]
    near = [entry for entry in injected if entry["kind"] == "near"]
    assert len(exact) == round(0.1 * len(source)) and len(near) >= round(0.2 * len(source))
    # every page and every copy is one HTML record, in the shard the truth names
    assert set(records) == set(source) | {entry["url"] for entry in injected}
    assert all(records[entry["url"]]["shard"] == entry["shard"] for entry in injected)
    assert manifest["records_by_kind"]["html_original"] == len(source)
    assert manifest["records_by_kind"]["html_near"] == len(near)
    for entry in exact:
        assert records[entry["url"]]["html"] == records[entry["original_url"]]["html"]
    natural = {url for group in truth["natural_duplicates"] for url in group}
    natural |= {url for a, b, _ in truth["natural_near_pairs"] for url in (a, b)}
    assert not natural & {entry["original_url"] for entry in injected}
    for entry in near:
        original = source[entry["original_url"]].decode("utf-8", errors="replace")
        copy = records[entry["url"]]["html"]
        assert copy != original and 1 <= entry["n_edits"] <= entry["n_units"]
        assert entry["n_edits"] == max(1, round(entry["edit_rate"] * entry["n_units"]))
        assert spec.edit_rate_range[0] <= entry["edit_rate"] <= spec.edit_rate_range[1]
        if entry["boilerplate"] == "none":  # only text nodes were edited: the markup is the same
            assert [p for t, p in split_markup(copy) if not t] == [p for t, p in split_markup(original) if not t]
    # each shard also holds what a reader must skip: a warcinfo, images, PDFs, 404 and 301 responses
    kinds = {entry["kind"] for entry in truth["aux"]}
    assert kinds == {"png", "pdf", "http404", "http301"}
    assert manifest["records_by_kind"]["warcinfo"] == len(manifest["shards"])
    assert not {entry["url"] for entry in truth["aux"]} & set(records)


def test_the_same_arguments_give_the_same_bytes_and_a_page_sample_keeps_its_pages(site_folder, tmp_path):
    spec = CrawlSpec(seed=2, docs_per_shard=30, max_pages=40)
    build_crawl(tmp_path / "a", [site(site_folder)], spec)
    build_crawl(tmp_path / "b", [site(site_folder)], spec)
    assert crawl_digest(tmp_path / "a") == crawl_digest(tmp_path / "b")
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["source_pages"] == 40 and manifest["packages"][0]["pages_used"] == 40
    build_crawl(tmp_path / "c", [site(site_folder)], CrawlSpec(seed=3, docs_per_shard=30, max_pages=40))
    assert crawl_digest(tmp_path / "c") != crawl_digest(tmp_path / "a")


def test_a_labelled_crawl_is_reused_only_while_its_settings_match(site_folder, tmp_path):
    from benchlib.crawls import LabelledCrawl, reusable_crawl

    spec = LabelledCrawl("sample", "sample-docs", tmp_path / "labels.jsonl", seed=4, docs_per_shard=30, max_pages=40)
    build_crawl(tmp_path / "crawl", [site(site_folder)], spec.spec)
    assert reusable_crawl(tmp_path / "crawl", spec)
    assert not reusable_crawl(tmp_path / "crawl", LabelledCrawl("sample", "sample-docs", spec.labels, seed=5,
                                                                 docs_per_shard=30, max_pages=40))  # fmt: skip
    assert not reusable_crawl(tmp_path / "crawl", LabelledCrawl("sample", "other-docs", spec.labels, seed=4,
                                                                 docs_per_shard=30, max_pages=40))  # fmt: skip

