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
    from lm_assets.corpus.curation.rules import apply_quality_rules, preset

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
    result = apply_quality_rules(frame, preset())
    assert result.dropped.select("doc_id", "reason").rows() == [("listing", "page:listing_page")]
    assert result.kept["doc_id"].to_list() == ["url-only", "plain"]
    assert "q_html_link_share" not in result.kept.columns  # a frame without extraction's columns gets none
    assert apply_quality_rules(frame.drop("q_url_listing", "q_title_listing"), preset()).dropped.height == 0
    assert apply_quality_rules(frame, preset(listing_page=None)).dropped.height == 0
