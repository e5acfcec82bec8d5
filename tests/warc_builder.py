"""Small WARC files for reader tests, written with warcio."""

from __future__ import annotations

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


def page(title: str, body: str, lang: str = "en") -> str:
    return (
        f'<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head><body>'
        f"<nav><a href='/'>Home</a> <a href='/about'>About</a></nav><article>{body}</article>"
        "<footer>© Example</footer></body></html>"
    )
