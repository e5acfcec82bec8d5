"""One gzip WARC shard: a warcinfo record, then responses (optionally after their request records)."""

from __future__ import annotations

import io
import random
import uuid
from datetime import datetime
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

USER_AGENT = "Mozilla/5.0 (compatible; lm-bench-crawler/1.0; +https://crawler.example/bot)"


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ShardWriter:
    """Writes `path`; record ids come from `rng`, so a rerun with the same seed writes the same bytes."""

    def __init__(self, path: Path, rng: random.Random, info: dict[str, str], date: datetime, warc_version: str = "1.0"):
        self.path, self.rng = path, rng
        self.counts: dict[str, int] = {}
        self.file = path.open("wb")
        self.writer = WARCWriter(self.file, gzip=True, warc_version=warc_version)
        fields = "".join(f"{key}: {value}\r\n" for key, value in info.items()).encode()
        record = self.writer.create_warc_record(
            "", "warcinfo", payload=io.BytesIO(fields), length=len(fields), warc_content_type="application/warc-fields",
            warc_headers_dict={"WARC-Record-ID": self.record_id(), "WARC-Date": iso(date), "WARC-Filename": path.name},
        )
        self._write(record, "warcinfo")

    def record_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def response(
        self, url: str, body: bytes, date: datetime, headers: list[tuple[str, str]], kind: str = "response",
        status: str = "200 OK", with_request: bool = False,
    ) -> None:
        """A response with these HTTP headers (Content-Type among them); `kind` is what it counts as."""
        http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
        response_id = self.record_id()
        if with_request:
            self._write(self._request(url, date, response_id), "request")
        record = self.writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http,
            warc_headers_dict={"WARC-Record-ID": response_id, "WARC-Date": iso(date)},
        )
        self._write(record, kind)

    def _request(self, url: str, date: datetime, response_id: str):
        host, _, rest = url.partition("://")[2].partition("/")
        http = StatusAndHeaders(
            f"GET /{rest} HTTP/1.1",
            [("Host", host), ("User-Agent", USER_AGENT), ("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"),
             ("Accept-Language", "en-US,en;q=0.7,zh-CN;q=0.5"), ("Connection", "close")],
            is_http_request=True,
        )
        return self.writer.create_warc_record(
            url, "request", http_headers=http,
            warc_headers_dict={"WARC-Record-ID": self.record_id(), "WARC-Date": iso(date),
                               "WARC-Concurrent-To": response_id},
        )

    def _write(self, record, kind: str) -> None:
        self.writer.write_record(record)
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def close(self) -> int:
        self.file.close()
        return self.path.stat().st_size
