import polars as pl

from lm_assets.corpus.curation.extract import ExtractConfig, clean_text, extract_documents
from lm_assets.corpus.curation.langid import LangIdConfig, identify_languages
from lm_assets.corpus.ingest.readers import DOCUMENT_SCHEMA
from tests.support.warc_builder import page

EN = "The river flows through the old town, past the market and the stone bridge. " * 8
ZH = "这条河流经古老的城镇，穿过热闹的集市和古老的石桥。当地居民每天早晨都会在河边散步。" * 4


def raw_docs(rows):
    base = {k: None for k in DOCUMENT_SCHEMA}
    return pl.DataFrame([{**base, "doc_id": str(i), **r} for i, r in enumerate(rows)], schema=DOCUMENT_SCHEMA)


def test_clean_text_strips_controls_and_normalizes():
    text, stripped = clean_text("caf\u0065\u0301\x00 ok\r\nnext\x07 line\x9f\n\n\n\nend")
    assert text == "café ok\nnext line\n\nend"
    assert stripped == 3


def test_extraction_keeps_main_content_title_and_lang_hint():
    html = page("河流与城镇", f"<h1>河流</h1><p>{ZH}</p>", lang="zh-CN")
    docs = raw_docs([{"html": html}, {"text": "plain \x00text"}, {"html": "<html><body><nav>x</nav></body></html>"}])
    result = extract_documents(docs, ExtractConfig())
    kept = result.kept
    assert kept["title"].to_list() == ["河流与城镇", None]
    assert kept["lang_hint"].to_list() == ["zh-cn", None]
    assert ZH[:20] in kept["text"][0]
    assert "Home" not in kept["text"][0]  # the nav bar is boilerplate
    assert kept["text"][1] == "plain text"
    assert kept["control_chars_stripped"].to_list() == [0, 1]
    assert result.dropped["reason"].to_list() == ["empty_after_extraction"]
    assert result.stats["control_chars_stripped"] == 1
    assert "html" not in kept.columns


def test_language_id_keeps_allowed_languages_with_scores():
    docs = pl.DataFrame(
        {
            "doc_id": ["en", "zh", "de"],
            "text": [EN, ZH, "Der Fluss fließt durch die alte Stadt, vorbei am Markt und der Steinbrücke. " * 5],
        }
    )
    result = identify_languages(docs, LangIdConfig())
    assert result.kept["lang"].to_list() == ["en", "zh"]
    assert all(s > 0.8 for s in result.kept["lang_score"].to_list())
    assert result.dropped["reason"].to_list() == ["lang:de"]
    assert "lid.176.ftz" in result.stats["model"]


def test_language_id_low_score_is_dropped():
    docs = pl.DataFrame({"doc_id": ["x"], "text": ["ok 123 ## -- ok"]})
    result = identify_languages(docs, LangIdConfig(allowed=("en", "zh"), min_score=0.99))
    assert result.kept.height == 0
    assert result.dropped["reason"][0].startswith(("lang_low_score:", "lang:"))


def test_language_id_reads_the_whole_page_not_its_opening():
    grammar = "CREATE [ OR REPLACE ] FUNCTION name ( [ [ argmode ] [ argname ] argtype [ { DEFAULT | = } expr ] ] ) " * 30
    prose = "The function body is executed every time the function is called, and its result is returned. " * 250
    docs = pl.DataFrame({"doc_id": ["sql", "mixed"], "text": [grammar + "\n\n" + prose, EN * 6 + ZH * 12]})
    result = identify_languages(docs, LangIdConfig())
    assert result.kept["lang"].to_list() == ["en", "zh"]
    sql, mixed = result.kept.row(0, named=True), result.kept.row(1, named=True)
    assert len(grammar) > 2000 and sql["lang_score"] > 0.7
    shares = {item["lang"]: item["share"] for item in mixed["lang_shares"]}
    assert shares["zh"] > shares["en"] > 0.2 and shares["zh"] + shares["en"] > 0.9


def test_a_page_mixing_allowed_languages_is_kept_by_their_joint_share():
    half = identify_languages(pl.DataFrame({"doc_id": ["mixed"], "text": [EN * 5 + ZH * 10]}), LangIdConfig(min_score=0.8))
    assert half.kept.height == 1
    only_zh = identify_languages(
        pl.DataFrame({"doc_id": ["mixed"], "text": [EN * 5 + ZH * 10]}), LangIdConfig(allowed=("zh",), min_score=0.8)
    )
    assert only_zh.kept.height == 0 and only_zh.dropped["reason"][0] == "lang_low_score:zh"


def test_a_page_over_the_time_budget_is_quarantined_and_the_rest_kept():
    from lm_assets.corpus.curation.extract import extract_batches

    deep = "<html><body>" + "<div>" * 20_000 + "<p>Deep text at the bottom.</p>" + "</div>" * 20_000 + "</body></html>"
    docs = pl.DataFrame(
        {
            "doc_id": ["a", "deep", "b"], "url": ["https://x.example/a", "https://x.example/deep", "https://x.example/b"],
            "source": ["s.warc.gz"] * 3, "record_index": [0, 1, 2],
            "html": [page("A", "<p>An ordinary page with a sentence.</p>"), deep, page("B", "<p>Another page.</p>")],
            "text": [None, None, None],
        }
    )
    result = extract_documents(docs, ExtractConfig(time_budget_s=0.05, max_depth=None))
    assert result.kept["doc_id"].to_list() == ["a", "b"] and result.dropped.height == 0
    held = result.quarantine.to_dicts()
    assert [(row["doc_id"], row["reason"], row["record_index"], row["url"]) for row in held] == [
        ("deep", "timeout", 1, "https://x.example/deep")
    ]
    assert held[0]["detail"].startswith("extraction took ") and result.stats["timeouts"] == 1
    unbounded = extract_documents(docs, ExtractConfig(time_budget_s=None, max_depth=None))
    assert unbounded.kept.height == 3 and unbounded.quarantine.height == 0
    streamed, _ = extract_batches(iter([docs.head(2), docs.tail(1)]), ExtractConfig(time_budget_s=0.05, max_depth=None))
    assert streamed.quarantine["doc_id"].to_list() == ["deep"] and streamed.stats["timeouts"] == 1


def test_a_page_nested_past_max_depth_is_quarantined_before_its_parse():
    from lm_assets.corpus.curation.extract import nesting_depth

    # 50,000 levels of nested lists: lexbor's parse alone takes seconds, and cannot be interrupted.
    deep = "<html><body>" + "<ul><li>" * 25_000 + "Deep text." + "</body></html>"
    shallow = page("A", "<ul>" + "<li>An item</li>" * 12_000 + "</ul>" + "<p>" * 12_000)
    docs = pl.DataFrame(
        {
            "doc_id": ["a", "deep"], "url": ["https://x.example/a", "https://x.example/deep"],
            "source": ["s.warc.gz"] * 2, "record_index": [0, 1], "html": [shallow, deep], "text": [None, None],
        }
    )
    result = extract_documents(docs, ExtractConfig())
    assert result.kept["doc_id"].to_list() == ["a"] and "An item" in result.kept["text"][0]
    held = result.quarantine.to_dicts()
    assert [(row["doc_id"], row["reason"]) for row in held] == [("deep", "timeout")]
    assert held[0]["detail"].startswith("nested over 10,000 elements deep: refused before its parse")
    assert result.stats["timeouts"] == 1
    # the scan stops one past the limit; void, self-closed, raw-text and implicitly closed elements do not nest
    assert nesting_depth(deep, 10_000) == 10_001 and nesting_depth(deep, 60_000) == 0
    assert nesting_depth("<div><p>a</p></div>" * 20_000, 100) == 0  # the running count of tags stays at 2
    assert nesting_depth(shallow, 100) == 5  # html, body, article, ul, li
    assert nesting_depth("<br>" * 300 + "<img/>" * 300 + "<script>" + "<div>" * 300 + "</script>", 100) == 0
    assert nesting_depth("<div>" * 150 + "<!-- " + "<div>" * 300 + " -->", 100) == 101
    assert nesting_depth("<p>a" * 300 + "<td>b" * 300 + "<li><b>x</b></li>" * 300, 100) == 4  # p, td, li, b
