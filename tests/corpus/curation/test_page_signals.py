"""What extraction records about the page itself: link density, markup, what it removed, link blocks, and
listing patterns of its URL and title."""

import polars as pl

from lm_assets.corpus.curation.extract import ExtractConfig, address_signals, extract_documents, extract_page

HEADLINES = [
    "Council approves the new budget after a long debate", "Storm closes schools across the region",
    "Local team wins the championship final", "Prices of houses rise for the third month",
    "Museum opens a wing for modern art", "Rail strike called off after late talks",
]
PORTAL = (
    "<html><head><title>City News - Home</title></head><body><header><a href='/'>City News</a></header>"
    + "".join(
        f"<section class='block'><h2><a href='/c{c}'>Section {c}</a></h2><ul>"
        + "".join(f"<li><a href='/story/{c}-{i}'>{h}</a> <span>2024-05-0{i % 9 + 1}</span></li>" for i, h in enumerate(HEADLINES))
        + "</ul></section>"
        for c in range(5)
    )
    + "<footer><a href='/about'>About</a> <a href='/privacy'>Privacy</a></footer></body></html>"
)
ARTICLE = (
    "<html><head><title>Why the council's budget took six months</title></head><body>"
    "<nav><a href='/'>Home</a> <a href='/news'>News</a> <a href='/sport'>Sport</a></nav><article><h1>Why the budget took six months</h1>"
    + "".join(
        f"<p>Paragraph {i}: the council argued for months over how to pay for schools, roads and the library, "
        "and each side brought its own figures to the table, which is why the final vote came so late.</p>"
        for i in range(8)
    )
    + "<p>Read more in our <a href='/budget'>budget guide</a>.</p></article></body></html>"
)


def test_a_portal_page_and_an_article_differ_in_every_page_signal():
    _, portal = extract_page(PORTAL, ExtractConfig())
    _, article = extract_page(ARTICLE, ExtractConfig())
    assert portal["q_html_link_share"] > 0.7 > 0.1 > article["q_html_link_share"]
    assert portal["q_html_links_per_kb"] > 5 * article["q_html_links_per_kb"]
    assert portal["q_html_removed_share"] > 0.7 and article["q_html_removed_share"] < 0.1
    assert portal["q_html_link_blocks"] >= 5 and article["q_html_link_blocks"] == 0
    assert 0 < portal["q_html_text_ratio"] < article["q_html_text_ratio"] < 1


def test_listing_urls_and_titles_in_english_and_chinese():
    assert address_signals("https://blog.example.cn/tags/travel/", "标签：旅行")["q_url_listing"] == 1
    assert address_signals("https://news.example.com/category/world/page/3", "World archives")["q_title_listing"] == 1
    assert address_signals("http://www.example.gov.cn/xwzx/list_12_3.html", "新闻中心 - 列表")["q_url_listing"] == 1
    assert address_signals("https://shop.example.com/search?q=shoes", "Search results for shoes")["q_url_listing"] == 1
    article = address_signals("https://news.example.com/2024/05/03/council-budget-vote.html", "Why the budget took six months")
    assert article == {"q_url_listing": 0, "q_url_depth": 4, "q_title_listing": 0, "q_title_error": 0}
    assert address_signals("https://www.example.com/index.html", "Example")["q_url_depth"] == 0
    assert address_signals("https://example.com/user/login", "用户登录")["q_title_error"] == 1
    assert address_signals("https://example.com/missing", "404 Not Found")["q_title_error"] == 1


def test_extracted_documents_carry_the_signals_and_text_rows_leave_them_null():
    docs = pl.DataFrame({
        "doc_id": ["portal", "article", "text"], "url": ["https://city.example/", "https://city.example/story/1", None],
        "html": [PORTAL, ARTICLE, None], "text": [None, None, "A plain text document with a sentence."],
    })
    result = extract_documents(docs)
    # Every link list of the portal goes, and nothing is left of it.
    assert result.dropped["doc_id"].to_list() == ["portal"]
    out = result.kept
    assert out.filter(pl.col("doc_id") == "text")["q_html_link_share"].item() is None
    article = out.filter(pl.col("doc_id") == "article").row(0, named=True)
    assert article["q_html_link_blocks"] == 0 and article["q_url_depth"] == 2 and article["q_title_listing"] == 0


def test_a_page_listed_by_its_url_and_title_is_dropped_by_the_default_rules_and_text_without_html_passes():
    from lm_assets.corpus.curation.rules import apply_rules, preset

    prose = (
        "The write-ahead log records every change before it reaches the database file. When a transaction commits, "
        "its pages are appended to the log and the database file is left untouched, so readers keep seeing a "
        "consistent snapshot. A checkpoint later copies the pages back. This design lets one writer and many readers "
        "work at the same time, and it makes a crash during a commit harmless: the log is replayed when the database "
        "is opened again. The size of the log grows until a checkpoint runs, so applications that never close their "
        "connections should run one themselves."
    )
    frame = pl.DataFrame({
        "doc_id": ["listing", "url-only", "plain"], "text": [prose] * 3, "lang": ["en"] * 3,
        "q_url_listing": [1, 1, None], "q_title_listing": [1, 0, None],
    })
    result = apply_rules(frame, preset())
    assert result.dropped.select("doc_id", "reason").rows() == [("listing", "page:listing_page")]
    assert result.kept["doc_id"].to_list() == ["url-only", "plain"]
    assert "q_html_link_share" not in result.kept.columns  # a frame without extraction's columns gets none
    assert apply_rules(frame.drop("q_url_listing", "q_title_listing"), preset()).dropped.height == 0
    assert apply_rules(frame, preset(listing_page=None)).dropped.height == 0


MODULE_SOURCE = '''"""Caching helpers for the session."""
import functools
from typing import Any


class CachingQuery(Query):
    """A query that reads its rows from a cache region when it can."""

    def __init__(self, region: str, *args: Any) -> None:
        self.region = region
        super().__init__(*args)

    def __iter__(self):
        if self.region is None:
            return super().__iter__()
        key = self.cache_key()
        return iter(self.cache.get_or_create(key, lambda: list(super().__iter__())))


def cache_key(query, prefix="q") -> str:
    return prefix + ":" + str(hash(query.statement))
'''
HELP_TEXT = (
    "*recover.txt*   How to recover from a crash\n\n"
    "You have spent several hours typing in that text that was going to finish the story, and then\n"
    "the power went out.  Vim keeps a swap file next to every file you edit, so most of the work can\n"
    "be brought back.  When you start editing the file again you are told that a swap file exists,\n"
    "and you can choose to recover it.  The swap file holds the changes you made since the last\n"
    "write, and it is removed when you quit normally.  See the section on swap files for where they\n"
    "are kept and how often they are written.\n"
)


def _pre_page(title: str, body: str, before: str = "") -> str:
    escaped = body.replace("&", "&amp;").replace("<", "&lt;")
    return f"<html><head><title>{title}</title></head><body><div class='body'><h1>{title}</h1>{before}<pre>{escaped}</pre></div></body></html>"


def test_a_source_listing_is_code_in_pre_and_a_manual_set_in_pre_or_a_tutorial_is_not():
    _, listing = extract_page(_pre_page("Source code for caching_query", MODULE_SOURCE), ExtractConfig())
    _, manual = extract_page(_pre_page("recover", HELP_TEXT), ExtractConfig())
    explained = "".join(f"<p>{sentence}</p>" for sentence in [
        "A caching query keeps the rows of a query in a cache region, so that a second run of the same query "
        "reads them from memory instead of the database.", "The region is named when the query is made, and "
        "the key is built from the statement, so two different queries never share rows.",
        "Subclass the query as below, and pass the region name as the first argument.",
    ] * 2)
    _, tutorial = extract_page(_pre_page("Caching queries", MODULE_SOURCE[:400], before=explained), ExtractConfig())
    _, article = extract_page(ARTICLE, ExtractConfig())
    assert listing["q_html_pre_share"] > 0.9 and listing["q_html_code_share"] > 0.5
    assert manual["q_html_pre_share"] > 0.9 and manual["q_html_code_share"] < 0.1
    assert tutorial["q_html_pre_share"] < 0.5 and tutorial["q_html_code_share"] < 0.3
    assert article["q_html_pre_share"] == article["q_html_code_share"] == 0.0


LICENCE = "".join(
    f"<p>{paragraph}</p>" for paragraph in [
        "This program is free software; you can redistribute it and/or modify it under the terms of the GNU General "
        "Public License as published by the Free Software Foundation; either version 2 of the License, or any later version.",
        "This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY; without even the "
        "implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the GNU General Public License.",
        "You should have received a copy of the GNU General Public License along with this program; if not, write to "
        "the Free Software Foundation, Inc., 51 Franklin Street, Fifth Floor, Boston, MA 02110-1301, USA.",
    ]
)


def test_a_source_listing_and_a_licence_are_dropped_even_when_a_classifier_decides():
    from lm_assets.corpus.curation.rules import apply_rules, preset

    docs = pl.DataFrame({
        "doc_id": ["listing", "manual", "licence"],
        "url": ["https://docs.example/_modules/caching_query.html", "https://docs.example/recover.html",
                "https://docs.example/appendix/gpl.html"],
        "html": [_pre_page("Source code for caching_query", MODULE_SOURCE * 3), _pre_page("recover", HELP_TEXT * 3),
                 f"<html><body><h1>GNU General Public License</h1>{LICENCE}</body></html>"],
        "text": [None, None, None],
    }, schema_overrides={"text": pl.String})
    extracted = extract_documents(docs).kept.with_columns(pl.lit("en").alias("lang"))
    deferred = apply_rules(extracted, preset(), defer=True)
    assert deferred.dropped.select("doc_id", "reason").sort("doc_id").rows() == [
        ("licence", "prose:max_licence_share"), ("listing", "page:source_listing"),
    ]
    assert deferred.kept["doc_id"].to_list() == ["manual"]
    relaxed = apply_rules(extracted, preset(source_listing=None, max_licence_share=None), defer=True)
    assert relaxed.dropped.height == 0
    assert apply_rules(extracted, preset("published")).dropped.filter(pl.col("reason") == "page:source_listing").height == 0
