import gzip
import json
import uuid
import zlib

import polars as pl
import pytest

from lm_assets.corpus.ingest.readers import make_doc_id, read_shard
from tests.support.warc_builder import ArcBuilder, WarcBuilder, page

ARTICLE = "<p>" + "A sentence about the history of computing machines. " * 20 + "</p>"


def reasons(table: pl.DataFrame) -> list[str]:
    return table["reason"].to_list()


def conserved(shard) -> bool:
    return shard.records == shard.documents.height + shard.dropped.height + shard.quarantine.height


def http(body: bytes, *headers: str) -> bytes:
    head = "\r\n".join(["HTTP/1.1 200 OK", "Content-Type: text/html; charset=utf-8", *headers])
    return head.encode() + b"\r\n\r\n" + body


def test_warc_sorts_records_into_documents_dropped_and_quarantine(tmp_path):
    path = (
        WarcBuilder()
        .warcinfo()
        .request("https://a.example/1")
        .response("https://a.example/1", page("One", ARTICLE))
        .response("https://a.example/missing", "gone", status="404 Not Found")
        .response("https://a.example/logo.png", b"\x89PNG\r\n\x1a\n", content_type="image/png")
        .response("https://a.example/gbk", "<p>中文网页内容</p>".encode("gbk"), content_type="text/html; charset=gbk")
        .response("https://a.example/bad", b"<p>binary \x00\x01\x02\x03 bytes</p>" * 20)
        .write(tmp_path / "s.warc.gz")
    )
    shard = read_shard(path)
    assert shard.records == 7
    assert shard.documents["url"].to_list() == ["https://a.example/1", "https://a.example/gbk"]
    assert "中文网页内容" in shard.documents["html"][1]
    assert sorted(reasons(shard.dropped)) == [
        "content_type:image/png", "http_status:404", "not_a_document:request", "not_a_document:warcinfo"
    ]
    assert reasons(shard.quarantine) == ["undecodable"]
    assert shard.quarantine["url"][0] == "https://a.example/bad"
    assert shard.documents["doc_id"][0] == make_doc_id("s.warc.gz", 2)


def test_gbk_page_declared_as_utf8_is_decoded_with_the_detected_charset(tmp_path):
    text = "安裝 manpages 和 manpages-dev 包之後，就可以用 man 命令閱讀手冊頁。Debian 是自由的作業系統。"
    path = (
        WarcBuilder()
        .response("https://a.example/gbk", f"<html><body><p>{text}</p></body></html>".encode("gbk"))
        .response("https://a.example/utf8", page("One", ARTICLE))
        .response("https://a.example/latin", "<p>Café crème brûlée, à la carte.</p>".encode("cp1252"))
        .write(tmp_path / "s.warc.gz")
    )
    shard = read_shard(path)
    assert shard.quarantine.height == 0
    docs = {row["url"]: row for row in shard.documents.iter_rows(named=True)}
    assert text in docs["https://a.example/gbk"]["html"]
    assert docs["https://a.example/gbk"]["charset"] == "gb18030"
    assert docs["https://a.example/gbk"]["charset_detected"] is True
    assert docs["https://a.example/utf8"]["charset"] == "utf-8"
    assert docs["https://a.example/utf8"]["charset_detected"] is False
    assert "Café crème brûlée" in docs["https://a.example/latin"]["html"]


def test_binary_body_declared_as_html_is_quarantined_not_guessed(tmp_path):
    import random

    noise = bytes(random.Random(0).randrange(256) for _ in range(4000))
    path = WarcBuilder().response("https://a.example/noise", noise).write(tmp_path / "s.warc.gz")
    shard = read_shard(path)
    assert shard.documents.height == 0
    assert reasons(shard.quarantine) == ["undecodable"]
    assert "utf-8" in shard.quarantine["detail"][0]


def test_doc_ids_are_stable_and_unique(tmp_path):
    builder = WarcBuilder()
    for i in range(5):
        builder.response(f"https://a.example/{i}", page("t", ARTICLE))
    path = builder.write(tmp_path / "s.warc.gz")
    first, second = read_shard(path), read_shard(path)
    assert first.documents["doc_id"].to_list() == second.documents["doc_id"].to_list()
    assert first.documents["doc_id"].n_unique() == 5


def test_corrupt_gzip_member_is_quarantined_and_later_records_survive(tmp_path):
    builder = WarcBuilder()
    for i in range(4):
        builder.response(f"https://a.example/{i}", page(f"p{i}", ARTICLE))
    data = bytearray(builder.buf.getvalue())
    start = builder.offsets[1]
    data[start + 40 : start + 80] = b"A" * 40
    path = tmp_path / "corrupt.warc.gz"
    path.write_bytes(bytes(data))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/0", "https://a.example/2", "https://a.example/3"]
    assert reasons(shard.quarantine) == ["corrupt_gzip"]
    assert shard.quarantine["byte_offset"][0] == start
    assert shard.records == 4


def warcio_urls(path) -> list[str]:
    """The target URIs of the records warcio reads, up to where it gives up."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    urls = []
    with open(path, "rb") as f:
        try:
            for record in ArchiveIterator(f, arc2warc=True):
                urls.append(record.rec_headers.get_header("WARC-Target-URI"))
        except ArchiveLoadFailed:
            pass
    return urls


@pytest.mark.parametrize("gzipped", [True, False])
def test_stray_bytes_between_records_cost_no_record(tmp_path, gzipped):
    builder = WarcBuilder(gzip=gzipped)
    for i in range(4):
        builder.response(f"https://a.example/{i}", page(f"p{i}", ARTICLE))
    data = bytearray(builder.buf.getvalue())
    data[builder.offsets[2] : builder.offsets[2]] = b"xyz"  # after the second record, before the third
    path = tmp_path / ("stray.warc.gz" if gzipped else "stray.warc")
    path.write_bytes(bytes(data))
    shard = read_shard(path)
    urls = [f"https://a.example/{i}" for i in range(4)]
    assert shard.documents["url"].to_list() == urls
    assert shard.quarantine.height == 0 and shard.records == 4
    # Every record warcio reads (it stops at the stray bytes, or now and then reads them and the next gzip member,
    # whose bytes vary with warcio's record dates and ids, as a record of junk with no URL of ours).
    read_by_warcio = {url for url in warcio_urls(path) if url and url.startswith("https://")}
    assert read_by_warcio <= set(urls)


def test_a_damaged_record_and_stray_bytes_after_it_cost_that_record_only(tmp_path):
    builder = WarcBuilder()
    for i in range(4):
        builder.response(f"https://a.example/{i}", page(f"p{i}", ARTICLE))
    data = bytearray(builder.buf.getvalue())
    data[builder.offsets[2] : builder.offsets[2]] = b"\x00\x00"
    data[builder.offsets[1] + 40 : builder.offsets[1] + 80] = b"A" * 40  # the second member's deflate data
    path = tmp_path / "damaged.warc.gz"
    path.write_bytes(bytes(data))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/0", "https://a.example/2", "https://a.example/3"]
    assert reasons(shard.quarantine) == ["corrupt_gzip"] and shard.quarantine["record_index"].to_list() == [1]
    assert conserved(shard) and shard.records == 4


def raw_response(url: str, block: bytes) -> bytes:
    """A plain WARC response record holding `block` as it is (warcio's writer would parse and fix it)."""
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: {url}\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
            f"WARC-Record-ID: <urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def test_malformed_http_is_quarantined_and_plain_variants_read_as_warcio_reads_them(tmp_path):
    body = page("Page", ARTICLE).encode()
    head = b"\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    path = tmp_path / "s.warc"
    path.write_bytes(b"".join([
        raw_response("https://a.example/lower", b"http/1.1 200 OK" + head + body),
        raw_response("https://a.example/crlf", b"\r\nHTTP/1.1 200 OK" + head + body),
        raw_response("https://a.example/httpx", b"HTTPX/1.1 200 OK" + head + body),
        raw_response("https://a.example/nostatus", b"<html>no status line</html>\r\n\r\n" + body),
    ]))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/lower", "https://a.example/crlf"]
    assert reasons(shard.quarantine) == ["bad_http", "bad_http"]
    assert shard.quarantine["url"].to_list() == ["https://a.example/httpx", "https://a.example/nostatus"]
    assert shard.dropped.height == 0 and conserved(shard)


def test_garbled_http_header_lines_are_quarantined_with_the_line(tmp_path):
    body = page("Page", ARTICLE).encode()
    ok = b"\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    path = tmp_path / "s.warc"
    path.write_bytes(b"".join([
        raw_response("https://a.example/nocolon", b"HTTP/1.1 200 OK\r\nServer nginx" + ok + body),
        raw_response("https://a.example/vt", b"HTTP/1.1 200 OK\r\nContent-\x0bType: text/html\r\n\r\n" + body),
        raw_response("https://a.example/fs", b"HTTP/1.1 200 OK\r\nX-A: 1\x1cContent-Type: text/html\r\n\r\n" + body),
        raw_response("https://a.example/folded", b"HTTP/1.1 200 OK\r\nX-Long: a\r\n  b" + ok + body),
    ]))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/folded"]
    assert reasons(shard.quarantine) == ["bad_http"] * 3 and shard.dropped.height == 0 and conserved(shard)
    assert shard.quarantine["detail"].to_list() == [
        "bad HTTP header line 'Server nginx'", "bad HTTP header line 'Content-\\x0bType: text/html'",
        "bad HTTP header line 'X-A: 1\\x1cContent-Type: text/html'"]


def test_a_content_length_longer_than_the_record_costs_that_record_only(tmp_path):
    block = http(page("Page", ARTICLE).encode())
    records = [raw_response(f"https://a.example/{i}", block) for i in range(4)]
    longer = b"Content-Length: %d" % (len(block) + 300)
    records[1] = records[1].replace(b"Content-Length: %d" % len(block), longer)
    request = (b"WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: https://a.example/r\r\n"
               b"WARC-Record-ID: <urn:uuid:5>\r\nContent-Length: 900\r\n\r\nGET / HTTP/1.1\r\n\r\n\r\n\r\n")
    path = tmp_path / "s.warc"
    path.write_bytes(b"".join([records[0], records[1], records[2], request, records[3]]))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/0", "https://a.example/2", "https://a.example/3"]
    assert shard.quarantine.select("url", "reason").rows() == [("https://a.example/1", "bad_length"), ("https://a.example/r", "bad_length")]
    assert shard.quarantine["byte_offset"][0] == len(records[0])
    assert f"starts at byte {len(records[0]) + len(records[1])}" in shard.quarantine["detail"][0]
    assert shard.records == 5 and conserved(shard)


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("length", [str(10**30), "9" * 5000, "12abc"])
def test_a_content_length_no_record_could_have_costs_that_record_only(tmp_path, gzipped, length):
    block = http(page("Page", ARTICLE).encode())
    records = [raw_response(f"https://a.example/{i}", block) for i in range(3)]
    records[1] = records[1].replace(b"Content-Length: %d" % len(block), b"Content-Length: " + length.encode())
    members = [gzip.compress(r) for r in records] if gzipped else records
    path = tmp_path / ("s.warc.gz" if gzipped else "s.warc")
    path.write_bytes(b"".join(members))
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/0", "https://a.example/2"]
    assert shard.quarantine.select("url", "reason", "byte_offset").rows() == [
        ("https://a.example/1", "bad_length", len(members[0]))]
    assert f"Content-Length {length[:20]}" in shard.quarantine["detail"][0]
    assert shard.records == 3 and conserved(shard)


def test_a_few_bad_bytes_are_replaced_and_counted_and_only_what_stays_unreadable_is_quarantined(tmp_path):
    article = page("Page", ARTICLE + "<p>Ünïcödé text, “quoted”.</p>").encode()
    damaged = article.replace(b"history", b"hist\xffory", 3)
    chinese = ("<html><body><p>" + "安裝 manpages 和 manpages-dev 包之後，就可以用 man 命令閱讀手冊頁。" * 20 + "</p></body></html>")
    gb = chinese.encode("gb18030")
    gb_damaged = gb[:200] + b"\x81\x20" + gb[200:]
    broken = article[:200] + bytes(range(0x80, 0xA0)) * 10 + article[200:]
    path = (
        WarcBuilder()
        .response("https://a.example/utf8", damaged)
        .response("https://a.example/gb", gb_damaged, content_type="text/html; charset=gb18030")
        .response("https://a.example/broken", broken)
        .write(tmp_path / "s.warc.gz")
    )
    shard = read_shard(path)
    docs = {row["url"]: row for row in shard.documents.iter_rows(named=True)}
    assert docs["https://a.example/utf8"]["replaced_chars"] == 3 and "hist\ufffdory" in docs["https://a.example/utf8"]["html"]
    assert "Ünïcödé text, “quoted”" in docs["https://a.example/utf8"]["html"]
    assert docs["https://a.example/gb"]["replaced_chars"] >= 1 and docs["https://a.example/gb"]["charset"] == "gb18030"
    assert "就可以用 man 命令閱讀手冊頁" in docs["https://a.example/gb"]["html"]
    assert shard.quarantine.select("url", "reason").rows() == [("https://a.example/broken", "undecodable")]
    assert "of the characters" in shard.quarantine["detail"][0]


def test_record_truncated_mid_gzip_is_quarantined(tmp_path):
    builder = WarcBuilder()
    for i in range(3):
        builder.response(f"https://a.example/{i}", page(f"p{i}", ARTICLE))
    data = builder.buf.getvalue()
    cut = builder.offsets[2] + (len(data) - builder.offsets[2]) // 2
    path = tmp_path / "truncated.warc.gz"
    path.write_bytes(data[:cut])
    shard = read_shard(path)
    assert shard.documents.height == 2
    assert reasons(shard.quarantine) == ["truncated_record"]
    assert shard.records == 3


def test_uncompressed_warc_and_wet(tmp_path):
    path = WarcBuilder(gzip=False).response("https://a.example/", page("t", ARTICLE)).write(tmp_path / "s.warc")
    assert read_shard(path).documents.height == 1
    wet = WarcBuilder().warcinfo().conversion("https://b.example/", "Plain text from a WET file.\nSecond line.")
    shard = read_shard(wet.write(tmp_path / "s.wet.gz"))
    assert shard.documents["text"].to_list() == ["Plain text from a WET file.\nSecond line."]
    assert shard.documents["html"].to_list() == [None]


def test_chunked_body_is_dechunked(tmp_path):
    html = page("One", ARTICLE).encode()
    chunked = b"%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (100, html[:100], len(html) - 100, html[100:])
    path = WarcBuilder().http_response("https://a.example/", http(chunked, "Transfer-Encoding: chunked"))
    shard = read_shard(path.write(tmp_path / "s.warc.gz"))
    assert shard.documents["html"].to_list() == [html.decode()]


def test_body_declared_chunked_but_stored_dechunked_is_kept_as_is(tmp_path):
    html = page("One", ARTICLE).encode()
    path = (
        WarcBuilder()
        .http_response("https://a.example/", http(html, "Transfer-Encoding: chunked"))
        .http_response("https://a.example/blank", http(b"\r\n" + html, "Transfer-Encoding: chunked"))
        .write(tmp_path / "s.warc.gz")
    )
    shard = read_shard(path)
    assert shard.quarantine.height == 0
    assert shard.documents["html"].to_list() == [html.decode(), "\r\n" + html.decode()]


def test_gzip_body_decoded_stored_decoded_accepted_damaged_quarantined(tmp_path):
    html = page("One", ARTICLE).encode()
    compressed = gzip.compress(html)
    damaged = compressed[:60] + b"x" * 40 + compressed[100:]
    path = (
        WarcBuilder()
        .http_response("https://a.example/gz", http(compressed, "Content-Encoding: gzip"))
        .http_response("https://a.example/plain", http(html, "Content-Encoding: gzip"))
        .http_response("https://a.example/damaged", http(damaged, "Content-Encoding: gzip"))
        .http_response("https://a.example/deflate", http(zlib.compress(html), "Content-Encoding: deflate"))
        .write(tmp_path / "s.warc.gz")
    )
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == [
        "https://a.example/gz", "https://a.example/plain", "https://a.example/deflate"
    ]
    assert set(shard.documents["html"]) == {html.decode()}
    assert reasons(shard.quarantine) == ["bad_http"]
    assert shard.quarantine["url"][0] == "https://a.example/damaged"
    assert conserved(shard)


@pytest.mark.parametrize("gzipped", [False, True])
def test_arc_records_are_read_like_warc_responses(tmp_path, gzipped):
    path = (
        ArcBuilder(gzip=gzipped)
        .response("http://a.example/1", page("One", ARTICLE), date="19961104142103")
        .response("http://a.example/missing", "gone", status="404 Not Found")
        .response("http://a.example/logo.png", b"\x89PNG\r\n\x1a\n", content_type="image/png")
        .record("dns:a.example", b"20010203040506\na.example. 300 IN A 192.0.2.1\n", content_type="text/dns")
        .response("http://a.example/a page", page("Two", ARTICLE))
        .write(tmp_path / ("s.arc.gz" if gzipped else "s.arc"))
    )
    shard = read_shard(path)
    assert shard.records == 6
    assert conserved(shard)
    docs = shard.documents
    assert docs["url"].to_list() == ["http://a.example/1", "http://a.example/a page"]
    assert docs["fetched_at"].to_list() == ["1996-11-04T14:21:03Z", "2001-02-03T04:05:06Z"]
    assert docs["content_type"].to_list() == ["text/html", "text/html"]
    assert docs["html"][0] == page("One", ARTICLE)
    assert docs["record_index"].to_list() == [1, 5]
    assert sorted(reasons(shard.dropped)) == [
        "content_type:image/png", "content_type:text/dns", "http_status:404", "not_a_document:filedesc"
    ]
    assert shard.quarantine.height == 0


def test_malformed_and_truncated_arc_records_are_quarantined(tmp_path):
    builder = (
        ArcBuilder(gzip=False)
        .response("http://a.example/1", page("One", ARTICLE))
        .record("http://a.example/bad", b"<p>x</p>", length="many")
        .response("http://a.example/2", page("Two", ARTICLE))
        .response("http://a.example/cut", page("Three", ARTICLE))
    )
    data = b"".join(builder.members())
    path = tmp_path / "s.arc"
    path.write_bytes(data[:-100])
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["http://a.example/1", "http://a.example/2"]
    assert reasons(shard.quarantine) == ["malformed_record", "truncated_record"]
    assert "many" in shard.quarantine["detail"][0]
    assert shard.quarantine["byte_offset"][0] == data.index(b"http://a.example/bad")
    assert shard.quarantine["url"][1] == "http://a.example/cut"
    assert conserved(shard)


def test_every_arc_header_is_counted_even_when_malformed(tmp_path):
    path = tmp_path / "bad.arc"
    path.write_bytes(
        b"filedesc://bad.arc 127.0.0.1 20140301000000 text/plain -1\n1 0 Bad\nURL IP-address Archive-date\n\n"
        b"http://a.example/ 192.0.2.1 201404010000000000 text/html -1\n\n"
        b"http://a.example/ 192.0.2.1 20140401000000 text/html abc\n"
    )
    shard = read_shard(path)
    assert reasons(shard.quarantine) == ["malformed_record"] * 3
    assert shard.records == 3 == len(warcio_urls(path)) and conserved(shard)


def test_arc_gz_cut_off_mid_member_is_quarantined(tmp_path):
    members = (
        ArcBuilder()
        .response("http://a.example/1", page("One", ARTICLE))
        .response("http://a.example/2", page("Two", ARTICLE))
        .members()
    )
    path = tmp_path / "s.arc.gz"
    path.write_bytes(b"".join(members)[: -len(members[-1]) // 2])
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["http://a.example/1"]
    assert reasons(shard.quarantine) == ["truncated_record"]
    assert conserved(shard)


def test_empty_shard_gets_a_quarantine_row(tmp_path):
    path = tmp_path / "empty.warc.gz"
    path.write_bytes(b"")
    shard = read_shard(path)
    assert shard.documents.height == 0
    assert reasons(shard.quarantine) == ["empty_shard"]


def test_fifty_megabyte_document_is_quarantined_not_loaded(tmp_path):
    big = "<p>" + "x" * (50 * 1024 * 1024) + "</p>"
    path = (
        WarcBuilder()
        .response("https://a.example/big", big)
        .response("https://a.example/small", page("t", ARTICLE))
        .write(tmp_path / "big.warc.gz")
    )
    shard = read_shard(path)
    assert shard.documents["url"].to_list() == ["https://a.example/small"]
    assert reasons(shard.quarantine) == ["oversize"]
    assert shard.quarantine["url"][0] == "https://a.example/big"


def test_jsonl_malformed_line_is_quarantined_and_the_rest_kept(tmp_path):
    lines = [
        json.dumps({"text": "first document", "url": "https://j.example/1"}),
        '{"text": "broken',
        json.dumps({"body": "no text field"}),
        json.dumps({"text": "third document", "url": "https://j.example/3"}),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    shard = read_shard(path)
    assert shard.documents["text"].to_list() == ["first document", "third document"]
    assert reasons(shard.quarantine) == ["malformed_json", "missing_text"]
    assert "line 2" in shard.quarantine["detail"][0]


def test_jsonl_lines_that_cannot_become_a_document_are_quarantined_with_their_line(tmp_path):
    lines = [
        json.dumps({"text": "first document", "url": "https://j.example/1"}),
        '{"text": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        json.dumps({"text": "url as an object", "url": {"href": "https://j.example/3"}}),
        json.dumps({"text": "url as a list", "url": ["https://j.example/4"]}),
        '{"text": "half a surrogate \\ud800", "url": "https://j.example/5"}',
        json.dumps({"text": "sixth document", "url": "https://j.example/6"}),
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    shard = read_shard(path)
    assert shard.documents.select("record_index", "text").rows() == [(0, "first document"), (5, "sixth document")]
    assert shard.quarantine.select("record_index", "reason").rows() == [
        (1, "malformed_json"), (2, "bad_url"), (3, "bad_url"), (4, "malformed_json")]
    details = shard.quarantine["detail"].to_list()
    assert details[0].startswith("line 2: nested deeper than") and details[1].startswith("line 3: url is a dict")
    assert details[2].startswith("line 4: url is a list") and details[3].startswith("line 5: ")
    assert "surrogate" in details[3] and shard.quarantine["url"].to_list() == [None] * 4
    assert shard.records == 6 and conserved(shard)


def test_parquet_url_that_is_not_a_string_is_quarantined(tmp_path):
    path = tmp_path / "s.parquet"
    pl.DataFrame({"text": ["one", "two"], "url": [{"href": "https://p.example/1"}, {"href": None}]}).write_parquet(path)
    shard = read_shard(path)
    assert shard.documents.height == 0 and reasons(shard.quarantine) == ["bad_url", "bad_url"]
    assert shard.quarantine["detail"][0].startswith("row 0: url is a dict") and conserved(shard)


def test_jsonl_gz_truncated(tmp_path):
    payload = gzip.compress("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(200)).encode())
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(payload[: len(payload) // 2])
    shard = read_shard(path)
    assert 0 < shard.documents.height < 200
    assert reasons(shard.quarantine) == ["corrupt_gzip"]


def test_non_utf8_jsonl_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    shard = read_shard(path)
    assert shard.documents.height == 1
    assert reasons(shard.quarantine) == ["undecodable"]


def test_parquet_shard(tmp_path):
    path = tmp_path / "s.parquet"
    pl.DataFrame({"text": ["one", None], "url": ["https://p.example/1", "https://p.example/2"]}).write_parquet(path)
    shard = read_shard(path)
    assert shard.documents["text"].to_list() == ["one"]
    assert reasons(shard.quarantine) == ["missing_text"]


def test_parquet_without_text_column_is_a_clear_error(tmp_path):
    path = tmp_path / "s.parquet"
    pl.DataFrame({"content": ["one"], "url": ["u"]}).write_parquet(path)
    with pytest.raises(ValueError, match=r"no text column 'text' \(columns: content, url\)"):
        read_shard(path)


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported shard file"):
        read_shard(path)
