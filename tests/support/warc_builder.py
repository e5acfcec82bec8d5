"""Small WARC files (written with warcio) and ARC files for reader tests."""

from __future__ import annotations

import gzip as gzip_module
import io
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


class WarcBuilder:
    """Collects records; `write()` returns the bytes and the offset of each record."""

    def __init__(self, gzip: bool = True):
        self.buf = io.BytesIO()
        self.writer = WARCWriter(self.buf, gzip=gzip)
        self.offsets: list[int] = []

    def _add(self, record):
        self.offsets.append(self.buf.tell())
        self.writer.write_record(record)
        return self

    def warcinfo(self):
        return self._add(self.writer.create_warcinfo_record("test.warc.gz", {"software": "tests"}))

    def request(self, url: str):
        head = StatusAndHeaders("GET / HTTP/1.1", [("Host", "example.com")], is_http_request=True)
        return self._add(self.writer.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=head))

    def response(self, url: str, body: bytes | str, content_type="text/html; charset=utf-8", status="200 OK"):
        if isinstance(body, str):
            body = body.encode("utf-8")
        head = StatusAndHeaders(status, [("Content-Type", content_type)], protocol="HTTP/1.1")
        return self._add(self.writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=head))

    def http_response(self, url: str, block: bytes):
        """A response record holding `block` byte for byte: status line, headers and body as given."""
        return self._add(
            self.writer.create_warc_record(
                url, "response", payload=io.BytesIO(block), warc_content_type="application/http; msgtype=response"
            )
        )

    def conversion(self, url: str, text: str):
        return self._add(
            self.writer.create_warc_record(
                url, "conversion", payload=io.BytesIO(text.encode()), warc_content_type="text/plain"
            )
        )

    def write(self, path: Path) -> Path:
        path.write_bytes(self.buf.getvalue())
        return path


class ArcBuilder:
    """ARC v1: a `filedesc://` record describing the file, then one record per response; with `gzip`,
    every record is its own gzip member."""

    def __init__(self, gzip: bool = True, name: str = "test.arc"):
        self.gzip = gzip
        self.records: list[bytes] = []
        version = b"1 0 tests\nURL IP-address Archive-date Content-type Archive-length\n"
        self.record(f"filedesc://{name}", version, content_type="text/plain", ip="0.0.0.0")

    def record(
        self, url: str, block: bytes, content_type="text/html", ip="192.0.2.1", date="20010203040506", length=None
    ):
        length = len(block) if length is None else length
        self.records.append(f"{url} {ip} {date} {content_type} {length}\n".encode() + block + b"\n")
        return self

    def response(self, url: str, body: bytes | str, content_type="text/html; charset=utf-8", status="200 OK", **kw):
        if isinstance(body, str):
            body = body.encode("utf-8")
        head = f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        return self.record(url, head.encode() + body, content_type=content_type.split(";")[0], **kw)

    def members(self) -> list[bytes]:
        return [gzip_module.compress(r) for r in self.records] if self.gzip else list(self.records)

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(self.members()))
        return path


def page(title: str, body: str, lang: str = "en") -> str:
    return (
        f'<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head><body>'
        f"<nav><a href='/'>Home</a> <a href='/about'>About</a></nav><article>{body}</article>"
        "<footer>© Example</footer></body></html>"
    )
