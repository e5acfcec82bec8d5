"""One gzip WARC shard: a warcinfo record, then responses (optionally after their request records)."""

from __future__ import annotations

import io
import random
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

REQUEST_HEADERS = (
    ("User-Agent", "Mozilla/5.0 (compatible; lm-bench-crawler/1.0; +https://crawler.example/bot)"),
    ("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"),
    ("Accept-Language", "en-US,en;q=0.7,zh-CN;q=0.5"),
    ("Connection", "close"),
)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ShardWriter:
    """Writes `path`; record ids come from `rng`, so a rerun with the same seed writes the same bytes.

    `log` has an entry per record: its index, offset in the file, WARC type, kind (what it counts as) and URL.
    A request record sends `request_headers` after its Host header."""

    def __init__(
        self, path: Path, rng: random.Random, info: dict[str, str], date: datetime, warc_version: str = "1.0",
        request_headers: tuple[tuple[str, str], ...] = REQUEST_HEADERS,
    ):
        self.path, self.rng, self.request_headers = path, rng, request_headers
        self.log: list[dict] = []
        self.file = path.open("wb")
        self.writer = WARCWriter(self.file, gzip=True, warc_version=warc_version)
        self._write(self.warcinfo_record(info, date), "warcinfo", None)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(entry["kind"] for entry in self.log))

    def record_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def warc_headers(self, record_id: str, date: datetime) -> dict[str, str]:
        return {"WARC-Record-ID": record_id, "WARC-Date": iso(date)}

    def warcinfo_record(self, info: dict[str, str], date: datetime):
        fields = "".join(f"{key}: {value}\r\n" for key, value in info.items()).encode()
        return self.writer.create_warc_record(
            "", "warcinfo", payload=io.BytesIO(fields), length=len(fields), warc_content_type="application/warc-fields",
            warc_headers_dict=self.warc_headers(self.record_id(), date) | {"WARC-Filename": self.path.name},
        )

    def response(
        self, url: str, body: bytes, date: datetime, headers: list[tuple[str, str]], kind: str = "response",
        status: str = "200 OK", with_request: bool = False,
    ) -> None:
        """A response with these HTTP headers (Content-Type among them); `kind` is what it counts as."""
        response_id = self.record_id()
        if with_request:
            self._write(self.request_record(url, date, response_id), "request", url)
        self._write(self.response_record(url, body, date, headers, status, response_id), kind, url)

    def response_record(self, url: str, body: bytes, date: datetime, headers: list[tuple[str, str]], status: str,
                        record_id: str):
        http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
        return self.writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http,
            warc_headers_dict=self.warc_headers(record_id, date),
        )

    def request_record(self, url: str, date: datetime, response_id: str):
        host, _, rest = url.partition("://")[2].partition("/")
        http = StatusAndHeaders(f"GET /{rest} HTTP/1.1", [("Host", host), *self.request_headers], is_http_request=True)
        return self.writer.create_warc_record(
            url, "request", http_headers=http,
            warc_headers_dict=self.warc_headers(self.record_id(), date) | {"WARC-Concurrent-To": response_id},
        )

    def _write(self, record, kind: str, url: str | None) -> None:
        self.log.append({"index": len(self.log), "offset": self.file.tell(), "type": record.rec_type, "kind": kind,
                         "url": url})
        self.writer.write_record(record)

    def close(self) -> int:
        self.file.close()
        return self.path.stat().st_size
