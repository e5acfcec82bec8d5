"""Read a crawl shard (WARC, WET, ARC, each plain or gzip; JSONL, JSONL.gz, Parquet) into normalized documents.

Every record read ends up in exactly one of three tables:
- `documents`: `doc_id, url, source, record_index, fetched_at, content_type, html, text`
  (`html` for HTML payloads, `text` for text payloads, the other one null);
- `dropped`: records that are not documents (warcinfo, request, ARC filedesc, non-2xx, non-text), with a reason;
- `quarantine`: records that could not be read (truncated, undecodable, corrupt), with a reason.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from lm_assets.corpus.stage import DROPPED_SCHEMA, QUARANTINE_SCHEMA
from lm_assets.jsonl import loads
from lm_assets.storage.keys import landing_files

DOCUMENT_SCHEMA = {
    "doc_id": pl.String,
    "url": pl.String,
    "source": pl.String,
    "record_index": pl.Int64,
    "fetched_at": pl.String,
    "content_type": pl.String,
    "charset": pl.String,
    "charset_detected": pl.Boolean,
    "replaced_chars": pl.Int64,
    "html": pl.String,
    "text": pl.String,
}
SUPPORTED_SUFFIXES = (
    ".warc", ".warc.gz", ".wet", ".wet.gz", ".arc", ".arc.gz", ".jsonl", ".jsonl.gz", ".parquet"
)
TEXT_TYPES = ("text/plain",)
HTML_TYPES = ("text/html", "application/xhtml+xml")
GZIP_MAGIC = b"\x1f\x8b\x08"
WARC_MAGIC = b"WARC/1."


@dataclass
class ReaderConfig:
    max_doc_bytes: int = 10_000_000
    text_field: str = "text"
    url_field: str = "url"
    id_field: str = "id"
    default_charset: str = "utf-8"


# Documents per batch a streaming read yields (`ShardReading`): a Common Crawl page is about 130 KB of HTML,
# so a batch holds about 33 MB; the writer gathers four into a row group (`DOCUMENT_ROW_GROUP_ROWS`).
BATCH_ROWS = 256


@dataclass
class ShardRead:
    source: str
    documents: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    quarantine: list[dict] = field(default_factory=list)
    records: int = 0
    batch_rows: int = BATCH_ROWS

    def full_batch(self) -> Iterator[pl.DataFrame]:
        """The documents read so far as one frame, once `batch_rows` of them are waiting."""
        if len(self.documents) >= self.batch_rows:
            yield self.take()

    def take(self) -> pl.DataFrame:
        batch = pl.DataFrame(self.documents, schema=DOCUMENT_SCHEMA)
        self.documents = []
        return batch

    def doc_id(self, index: int) -> str:
        return make_doc_id(self.source, index)

    def keep(self, index, url, fetched_at, content_type, html=None, text=None, charset=None, detected=False, replaced=0):
        self.documents.append(
            {
                "doc_id": self.doc_id(index),
                "url": url,
                "source": self.source,
                "record_index": index,
                "fetched_at": fetched_at,
                "content_type": content_type,
                "charset": charset,
                "charset_detected": detected,
                "replaced_chars": replaced,
                "html": html,
                "text": text,
            }
        )

    def drop(self, index: int, reason: str):
        self.dropped.append({"doc_id": self.doc_id(index), "stage": "raw", "reason": reason})

    def quarantine_record(self, index: int, reason: str, detail: str = "", offset=None, url=None):
        self.quarantine.append(
            {
                "doc_id": self.doc_id(index),
                "source": self.source,
                "record_index": index,
                "byte_offset": offset,
                "url": url,
                "reason": reason,
                "detail": detail[:500],
            }
        )

    def frames(self) -> RawShard:
        return RawShard(
            documents=pl.DataFrame(self.documents, schema=DOCUMENT_SCHEMA),
            dropped=pl.DataFrame(self.dropped, schema=DROPPED_SCHEMA),
            quarantine=pl.DataFrame(self.quarantine, schema=QUARANTINE_SCHEMA),
            records=self.records,
        )


@dataclass
class RawShard:
    """The three tables of one shard, and how many records the reader saw (counted independently)."""

    documents: pl.DataFrame
    dropped: pl.DataFrame
    quarantine: pl.DataFrame
    records: int


DONE_SUFFIX = ".done"


def landing_shards(storage, settle_s: float = 0.0, now: float | None = None,
                   known: frozenset[str] | set[str] = frozenset()) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The complete shard files at the top of a landing location (a `Storage`), and every other file there
    with why it is skipped: a FIFO, socket or device, a symlink out of a root that confines its links, and a
    file that may still be being written among them. A file is complete once `<name>.done` lies beside it, or once it has been
    unchanged (size and modification time) for `settle_s` seconds; a writer that renames a finished file
    into place from a hidden name (`.name.part`) needs neither. Files `known` already (registered shards) are
    taken as they are: only new ones are looked at, one stat (or S3 HEAD) each."""
    listed = storage.list(hidden=True)
    markers = {key.removesuffix(DONE_SUFFIX) for key in listed if key.endswith(DONE_SUFFIX)}
    shards, skipped = landing_files([key for key in listed if not key.endswith(DONE_SUFFIX)], SUPPORTED_SUFFIXES)
    if storage.confine_links:
        for key in list(shards):
            if target := storage.outside_link(key):
                shards.remove(key)
                skipped[key] = f"a symlink to {target}, outside the landing root (refused unless follow_links_outside)"
    skipped |= storage.special_files()  # FIFOs, sockets, devices: never registered, never opened
    if not storage.is_s3:
        for entry in Path(storage.root).iterdir():  # what a listing of files passes over without a word
            if entry.is_symlink() and not entry.exists():
                skipped[entry.name] = f"a symlink to {os.readlink(entry)}, which does not exist"
            elif entry.is_symlink() and entry.is_dir():
                skipped[entry.name + "/"] = f"a symlink to the folder {os.readlink(entry)}; only files at the top are shards"
    if settle_s > 0:
        now = time.time() if now is None else now
        for key in [k for k in shards if k not in markers and k not in known]:
            age = now - storage.file_state(key)[1]
            if age < settle_s:
                shards.remove(key)
                skipped[key] = (f"changed {max(age, 0):.0f} s ago, maybe still being written: taken once unchanged for "
                                f"{settle_s:g} s, or once {key}{DONE_SUFFIX} says it is complete")  # fmt: skip
    return shards, skipped


def make_doc_id(source: str, index: int) -> str:
    """Stable id from the shard name and the record's position in it."""
    return hashlib.blake2b(f"{source}\x00{index}".encode(), digest_size=8).hexdigest()


def shard_format(name: str) -> str:
    lower = name.lower()
    for suffix in SUPPORTED_SUFFIXES:
        if lower.endswith(suffix):
            return suffix.split(".")[1]
    raise ValueError(f"unsupported shard file {name!r}: expected one of {', '.join(SUPPORTED_SUFFIXES)}")


def read_shard(path: str | Path, source: str | None = None, config: ReaderConfig | None = None) -> RawShard:
    """Read one shard file into documents, dropped and quarantine tables, all in memory."""
    reading = ShardReading(path, source, config)
    batches = list(reading.batches())
    shard = reading.read.frames()
    shard.documents = pl.concat([*batches, shard.documents]).rechunk()
    return shard


class ShardReading:
    """One shard read as a stream: `batches()` yields its documents in order, `batch_rows` at a time (the
    last batch shorter); once it is exhausted, `read` holds the dropped and quarantined records (a few
    bytes each) and the record count."""

    def __init__(self, path: str | Path, source: str | None = None, config: ReaderConfig | None = None,
                 batch_rows: int = BATCH_ROWS):  # fmt: skip
        self.path = Path(path)
        self.config = config or ReaderConfig()
        self.read = ShardRead(source=source or self.path.name, batch_rows=batch_rows)

    def batches(self) -> Iterator[pl.DataFrame]:
        path, read, config = self.path, self.read, self.config
        fmt = shard_format(path.name)
        if path.stat().st_size == 0:
            read.quarantine_record(0, "empty_shard", "the file has 0 bytes")
            read.records = 1
            return
        if fmt in ("warc", "wet"):
            yield from _read_warc(path, read, config)
        elif fmt == "arc":
            yield from _read_arc(path, read, config)
        elif fmt == "jsonl":
            yield from _read_jsonl(path, read, config)
        else:
            yield from _read_parquet(path, read, config)
        if read.records == 0:
            read.quarantine_record(0, "empty_shard", "the file holds no records")
            read.records = 1
        if read.documents:
            yield read.take()


# WARC -----------------------------------------------------------------------------------------
def _read_warc(path: Path, read: ShardRead, config: ReaderConfig) -> Iterator[pl.DataFrame]:
    """Iterate with fastwarc. Where it fails, resume at the nearest record start after the last record
    read: stray bytes between records then cost nothing, and only a record that cannot be read from its
    own start is quarantined, up to the next record start."""
    from fastwarc.warc import ArchiveIterator

    size = path.stat().st_size
    with open(path, "rb") as f:
        gzipped = f.read(3) == GZIP_MAGIC
        start = 0
        while start < size:
            f.seek(start)
            last_good = resume = None
            try:
                for record in ArchiveIterator(f, parse_http=False, auto_decode="none"):
                    last_good = record.stream_pos  # absolute: fastwarc reads from the seeked file
                    resume = _handle_warc_record(record, last_good, read, config, gzipped, f)
                    yield from read.full_batch()
                    if resume is not None:
                        break
            except Exception as exc:  # noqa: BLE001 - fastwarc raises OSError/ValueError on damage
                reason, error = ("corrupt_gzip" if gzipped else "corrupt_record"), str(exc)
                bad = start
                if last_good is not None:
                    # The next record after the last one read: whole (stray bytes before it are skipped)
                    # or the damaged one.
                    bad = _find(f, GZIP_MAGIC if gzipped else WARC_MAGIC, _record_end(f, last_good, size, gzipped), size)
                    if bad < size and _is_record_start(f, bad, gzipped):
                        start = bad
                        continue
            else:
                if resume is not None:
                    start = resume
                    continue
                # fastwarc can end quietly before a record cut off mid-gzip: look for one after the last record.
                reason, error = "truncated_record", "record cut off before its end"
                bad = start if last_good is None else _next_member(f, last_good + 1, size, gzipped)
            if bad >= size:
                return
            resume = _next_member(f, bad + 1, size, gzipped)
            index = read.records
            read.records += 1
            read.quarantine_record(index, reason, f"{error}; bytes {bad}-{resume} skipped", offset=bad)
            start = resume


def _record_end(f, offset: int, size: int, gzipped: bool) -> int:
    """Where the record read at `offset` ends: its gzip member's end, or its header, block and the
    blank line after them; `offset + 1` when that cannot be told."""
    f.seek(offset)
    if gzipped:
        member, consumed = zlib.decompressobj(wbits=31), 0
        try:
            while not member.eof:
                chunk = f.read(1 << 16)
                if not chunk:
                    return size
                member.decompress(chunk, 1 << 20)
                while member.unconsumed_tail and not member.eof:
                    member.decompress(member.unconsumed_tail, 1 << 20)
                consumed += len(chunk)
        except zlib.error:
            return offset + 1
        return offset + consumed - len(member.unused_data)
    head = f.read(1 << 16)
    header_end = head.find(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:[ \t]*(\d+)", head[:header_end]) if header_end > 0 else None
    if not length:
        return offset + 1
    return min(offset + header_end + 4 + int(length[1]), size) if len(length[1]) <= 18 else size


def _next_member(f, start: int, size: int, gzipped: bool) -> int:
    """Offset of the next record start (a gzip member holding a WARC record) after `start`, or the file size."""
    marker = GZIP_MAGIC if gzipped else WARC_MAGIC
    pos = start
    while pos < size:
        hit = _find(f, marker, pos, size)
        if hit >= size or _is_record_start(f, hit, gzipped):
            return hit
        pos = hit + 1
    return size


def _find(f, marker: bytes, start: int, size: int) -> int:
    f.seek(start)
    offset, tail = start, b""
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            return size
        buf = tail + chunk
        hit = buf.find(marker)
        if hit >= 0:
            return offset - len(tail) + hit
        tail = buf[-(len(marker) - 1) :]
        offset += len(chunk)


def _is_record_start(f, offset: int, gzipped: bool) -> bool:
    """Whether a WARC record header starts at `offset`. The gzip magic also turns up inside compressed
    data, and "WARC/1." inside a page: a real record decompresses (or reads) to a version line and a
    header block that names its type and length."""
    f.seek(offset)
    if gzipped:
        try:
            head = zlib.decompressobj(wbits=31).decompress(f.read(1 << 16), 1 << 16)
        except zlib.error:
            return False
    else:
        head = f.read(1 << 16)
    header = head.partition(b"\r\n\r\n")[0]
    return (re.match(rb"WARC/1\.[01]\r\n", header) is not None and re.search(rb"(?im)^warc-type:", header) is not None
            and re.search(rb"(?im)^content-length:", header) is not None)


def _handle_warc_record(record, offset: int, read: ShardRead, config: ReaderConfig, gzipped: bool, f) -> int | None:
    """File the record at `offset`. Returns where reading must resume when the record's Content-Length
    ran into the next record or is not a length fastwarc could read (None: go on)."""
    index = read.records
    read.records += 1
    headers = record.headers
    rtype = (headers.get("WARC-Type") or "").lower()
    url = headers.get("WARC-Target-URI")
    fetched_at = headers.get("WARC-Date")
    if headers.get("Content-Length") is None:
        read.quarantine_record(index, "truncated_record", "WARC header cut off (no Content-Length)", offset, url)
        return
    declared = headers.get("Content-Length").strip()
    if not _is_length(declared, record.content_length):
        resume = _next_member(f, offset + 1, os.fstat(f.fileno()).st_size, gzipped)
        detail = f"Content-Length {declared[:40]} is not a length a record can have; reading resumes at byte {resume}"
        read.quarantine_record(index, "bad_length", detail, offset, url)
        return resume
    document = rtype in ("response", "conversion", "resource")
    if not document and gzipped:  # a plain record's block is read to see that it ends where it says
        read.drop(index, f"not_a_document:{rtype or 'unknown'}")
        return
    try:
        block = record.reader.read(config.max_doc_bytes + 1)
    except (OSError, ValueError) as exc:  # the record's own bytes are damaged: it is filed, then the file resyncs
        read.quarantine_record(index, "corrupt_gzip" if gzipped else "corrupt_record", str(exc), offset, url)
        return
    expected = record.content_length
    if not gzipped and (next_start := _overrun(f, offset, block)) is not None:
        read.quarantine_record(index, "bad_length", f"Content-Length {expected} runs into the next record, which "
                               f"starts at byte {next_start}", offset, url)  # fmt: skip
        return next_start
    if not document:
        read.drop(index, f"not_a_document:{rtype or 'unknown'}")
        return
    if len(block) > config.max_doc_bytes:
        read.quarantine_record(
            index, "oversize", f"record larger than {config.max_doc_bytes} bytes", offset, url
        )
        return
    if len(block) < expected:
        read.quarantine_record(
            index, "truncated_record", f"{len(block)} of {expected} bytes present", offset, url
        )
        return
    declared = (headers.get("Content-Type") or "").lower()
    if rtype == "response" and (declared.startswith("application/http") or block.lstrip(b"\r\n")[:5].upper() == b"HTTP/"):
        _keep_http_response(read, index, url, fetched_at, block, offset, config)
    else:
        content_type = headers.get("Content-Type") or ("text/plain" if rtype == "conversion" else "")
        _keep_payload(read, index, url, fetched_at, content_type, block, offset, config)


def _is_length(declared: str, read_as: int) -> bool:
    """Whether a Content-Length header is a decimal number that fastwarc read as it is (one too large for
    it to hold is read as another number)."""
    return declared.isascii() and declared.isdigit() and len(declared) <= 18 and int(declared) == read_as


def _overrun(f, offset: int, block: bytes) -> int | None:
    """Where the next record starts inside `block`, read for the plain WARC record at `offset`, when its
    Content-Length claims more bytes than the record has; else None."""
    cut = block.find(b"\r\n\r\nWARC/1.")
    if cut < 0:
        return None
    here = f.tell()
    try:
        f.seek(offset)
        header_end = f.read(1 << 16).find(b"\r\n\r\n")
        start = offset + header_end + 4 + cut + 4
        return start if header_end > 0 and _is_record_start(f, start, False) else None
    finally:
        f.seek(here)


def _keep_http_response(read, index, url, fetched_at, block, offset, config):
    try:
        status, http_headers, payload = parse_http_response(block)
    except ValueError as exc:
        read.quarantine_record(index, "bad_http", str(exc), offset, url)
        return
    if not 200 <= status < 300:
        read.drop(index, f"http_status:{status}")
        return
    _keep_payload(read, index, url, fetched_at, http_headers.get("content-type", ""), payload, offset, config)


def _keep_payload(read, index, url, fetched_at, content_type, payload, offset, config):
    mime, charset = parse_content_type(content_type)
    if mime not in HTML_TYPES and mime not in TEXT_TYPES:
        read.drop(index, f"content_type:{mime or 'missing'}")
        return
    try:
        decoded = decode_payload(payload, charset, is_html=mime in HTML_TYPES, default=config.default_charset)
    except UndecodableError as exc:
        read.quarantine_record(index, "undecodable", str(exc), offset, url)
        return
    field = "html" if mime in HTML_TYPES else "text"
    read.keep(index, url, fetched_at, mime, charset=decoded.charset, detected=decoded.detected,
              replaced=decoded.replaced, **{field: decoded.text})  # fmt: skip


_STATUS_LINE = re.compile(r"HTTP/\d(?:\.\d)? +(\d{3})(?: .*)?", re.IGNORECASE)
# Control characters other than tab, which no header line holds (RFC 9110 field values).
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_http_response(block: bytes) -> tuple[int, dict[str, str], bytes]:
    """Split an HTTP response into status, lower-cased headers and the decoded body. Read leniently where
    the meaning is plain (blank lines before the status line, a lower-case protocol name, as warcio
    does; folded header lines); any other status line, and a header line without a colon or holding
    control characters, is refused."""
    block = block.lstrip(b"\r\n")
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = block.partition(b"\n\n")
    lines = [line.removesuffix("\r") for line in head.decode("latin-1").split("\n")]
    status = _STATUS_LINE.fullmatch(lines[0].strip())
    if status is None:
        raise ValueError(f"bad HTTP status line {lines[0][:80]!r}" if lines[0].strip() else "empty HTTP head")
    headers, name = {}, None
    for line in lines[1:]:
        if _HEADER_CONTROL.search(line) or not (":" in line or (name and line[:1] in " \t")):
            raise ValueError(f"bad HTTP header line {line[:80]!r}")
        if line[:1] in " \t":  # an obsolete folded continuation of the header above
            headers[name] = f"{headers[name]} {line.strip()}".strip()
            continue
        name, _, value = line.partition(":")
        name = name.strip().lower()
        headers[name] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    return int(status[1]), headers, _decode_content(body, headers.get("content-encoding", "").lower())


_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]+)[ \t]*(?:;[^\r\n]*)?\r\n")


def _dechunk(body: bytes) -> bytes:
    """Undo chunked transfer encoding as far as the body follows it, and take the rest as it is: crawlers
    often store the body de-chunked under the original header (warcio reads it the same way). A body
    cut off inside a chunk keeps what is there."""
    chunks, pos = [], 0
    while size_line := _CHUNK_SIZE.match(body, pos):
        start = size_line.end()
        end = start + int(size_line[1], 16)
        if end == start:
            return b"".join(chunks)
        if end + 2 <= len(body) and body[end : end + 2] != b"\r\n":
            break
        chunks.append(body[start:end])
        pos = end + 2
    chunks.append(body[pos:])
    return b"".join(chunks)


def _decode_content(body: bytes, encoding: str) -> bytes:
    """Undo gzip or deflate content encoding; a body stored already decoded under the original header
    is taken as it is, as warcio does. A gzip body cut off keeps what decompresses."""
    if encoding in ("gzip", "x-gzip"):
        if not body.startswith(b"\x1f\x8b"):
            return body
        try:
            return zlib.decompressobj(31).decompress(body)
        except zlib.error as exc:
            raise ValueError(f"damaged gzip body: {exc}") from exc
    if encoding == "deflate":
        for wbits in (15, -15):  # zlib-wrapped as the standard says, or raw as some servers send it
            inflater = zlib.decompressobj(wbits)
            try:
                inflated = inflater.decompress(body)
            except zlib.error:
                continue
            if inflater.eof:
                return inflated
    return body


def parse_content_type(value: str) -> tuple[str, str | None]:
    mime, *params = [p.strip() for p in (value or "").split(";")]
    charset = None
    for param in params:
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'").lower() or None
    return mime.lower(), charset


class UndecodableError(ValueError):
    """Bytes that decode as text neither with their declared charset nor with the detected one."""


@dataclass(frozen=True)
class Decoded:
    text: str
    charset: str
    # True when the declared charset failed and the bytes' own encoding was detected instead.
    detected: bool
    # Characters whose bytes were not valid in `charset`, decoded as U+FFFD.
    replaced: int = 0


# C0 and C1 controls other than tab, newline, carriage return and form feed: text has almost none.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
# In UTF-8 the C0 controls and DEL are their own bytes, never part of another character, and the C1
# controls are \xc2\x80-\xc2\x9f: counted in the bytes, without a pattern over the text.
_NOT_C0_BYTES = bytes(b for b in range(256) if not (b <= 0x08 or b == 0x0B or 0x0E <= b <= 0x1F or b == 0x7F))
_C1_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")
MAX_CONTROL_SHARE = 0.001
# Browsers decode a page with a few bad bytes with U+FFFD in their place; past this share of the
# characters the charset is wrong rather than a few bytes damaged.
MAX_REPLACED_SHARE = 0.01


def decode_payload(payload: bytes, charset: str | None, is_html: bool, default: str = "utf-8") -> Decoded:
    """Decode with the declared charset (HTTP header, else `<meta charset>`, else `default`).

    When the bytes are not valid in it:
    - UTF-8 with a few damaged bytes (more valid multi-byte characters than invalid sequences) is
      decoded with U+FFFD in their place, counted in `replaced`, as browsers do. It is never re-read in
      another charset, which would garble every valid character.
    - Otherwise (a GBK page declared as UTF-8, an unknown label) the encoding is detected from the bytes
      (resiliparse's uchardet) and used if it decodes them strictly.
    - Failing that, the declared charset with replacement, when at most `MAX_REPLACED_SHARE` of the
      characters are replaced.
    Text must be plausible: no NUL and at most `MAX_CONTROL_SHARE` control characters, so binary data
    is never taken for text. Raises UndecodableError, with the share that could not be read, when
    nothing works; the caller quarantines the record.
    """
    if charset is None and is_html:
        charset = _meta_charset(payload[:4096])
    declared = _normalize_charset(charset or default)
    try:
        return Decoded(_as_text(payload, declared), declared, False)
    except (UnicodeDecodeError, LookupError, UndecodableError) as exc:
        failure = _describe(exc, declared)
    if declared == "utf-8" and _mostly_utf8(payload):
        return _with_replacement(payload, declared, failure + "; the rest is UTF-8, so this is damaged UTF-8")
    from resiliparse.parse.encoding import detect_encoding

    detected = detect_encoding(payload, html5_compatible=True)
    detected = _normalize_charset(detected.lower()) if detected else None
    if detected and detected != declared:
        try:
            return Decoded(_as_text(payload, detected), detected, True)
        except (UnicodeDecodeError, LookupError, UndecodableError) as exc:
            failure += f"; detected {_describe(exc, detected)}"
    return _with_replacement(payload, declared, failure)


def _with_replacement(payload: bytes, charset: str, failure: str) -> Decoded:
    """`payload` in `charset` with U+FFFD for what is not valid in it, when that is a small share."""
    try:
        text = payload.decode(charset, errors="replace")
    except LookupError:
        raise UndecodableError(failure) from None
    try:
        own = payload.count("\ufffd".encode(charset))  # U+FFFD the page itself holds
    except UnicodeEncodeError:
        own = 0
    replaced = text.count("\ufffd") - own
    share = replaced / max(len(text), 1)
    if share > MAX_REPLACED_SHARE:
        raise UndecodableError(f"{failure}; {share:.1%} of the characters ({replaced:,}) cannot be read in {charset}")
    _check_controls(text, len(_CONTROL.findall(text)), charset)
    return Decoded(text, charset, False, replaced)


def _mostly_utf8(payload: bytes) -> bool:
    """More valid multi-byte UTF-8 characters than invalid sequences: UTF-8 with some bytes damaged."""
    text = payload.decode("utf-8", errors="replace")
    invalid = text.count("\ufffd")
    valid = sum(1 for char in text if char > "\x7f") - invalid
    return valid > invalid


def _as_text(payload: bytes, charset: str) -> str:
    text = payload.decode(charset, errors="strict")
    if charset == "utf-8":
        controls = len(payload.translate(None, _NOT_C0_BYTES))
        controls += len(_C1_UTF8.findall(payload)) if b"\xc2" in payload else 0
    else:
        controls = len(_CONTROL.findall(text))
    return _check_controls(text, controls, charset)


def _check_controls(text: str, controls: int, charset: str) -> str:
    if "\x00" in text or controls > MAX_CONTROL_SHARE * max(len(text), 1000):
        raise UndecodableError(f"{charset}: {max(controls, 1)} control characters, binary rather than text")
    return text


def _describe(exc: Exception, charset: str) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"{charset}: {exc.reason} at byte {exc.start}"
    if isinstance(exc, LookupError):
        return f"unknown charset {charset!r}"
    return str(exc)


def _meta_charset(head: bytes) -> str | None:
    lower = head.lower()
    pos = lower.find(b"charset=")
    if pos < 0:
        return None
    value = lower[pos + 8 : pos + 40].lstrip(b"\"' ")
    end = 0
    while end < len(value) and (chr(value[end]).isalnum() or value[end] in b"-_"):
        end += 1
    return value[:end].decode("ascii") or None


def _normalize_charset(charset: str) -> str:
    # Browsers decode these labels as the wider superset; so do we.
    return {"gb2312": "gb18030", "gbk": "gb18030", "iso-8859-1": "cp1252", "latin1": "cp1252"}.get(
        charset, charset
    )


# ARC ------------------------------------------------------------------------------------------
# A record header: URL, IP address, archive date, content type, five more fields in ARC v2, length.
# The URL is matched lazily so that one with a space in it still parses.
_ARC_HEADER = re.compile(r"(.+?) (\S+) (\d{14}) (\S+) (?:(?:\S+ ){5})?(\d+)\r?\n")
# What an ARC header looks like even when a field is wrong (a negative or missing length, a long date):
# each such line starts a record of its own, read or quarantined, so none is absorbed into another.
_ARC_HEADER_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S* \S+ \d{8,} \S+( \S+)*\r?\n")
_ARC_LINE_LIMIT = 1 << 16


def _read_arc(path: Path, read: ShardRead, config: ReaderConfig) -> Iterator[pl.DataFrame]:
    """ARC records are a header line, `length` bytes and a newline; the first describes the file
    (`filedesc://`). In .arc.gz each record is its own gzip member; they are read as one stream, so a
    damaged member ends the shard with one quarantined record for the rest, and offsets are known
    only in plain ARC."""
    gzipped = path.name.lower().endswith(".gz")
    with (gzip.open if gzipped else open)(path, "rb") as f:
        line = b""
        while True:
            index = read.records
            try:
                line = line or _arc_line(f)
                if not line:
                    return
                read.records += 1
                offset = None if gzipped else f.tell() - len(line)
                header = _ARC_HEADER.fullmatch(line.decode("utf-8", "replace"))
                if header is None:
                    detail = f"not an ARC record header: {line[:80]!r}"
                    line, skipped = _skip_to_arc_header(f)  # the header found starts the next record
                    read.quarantine_record(index, "malformed_record", f"{detail}; {skipped} more bytes skipped", offset)
                    continue
                line = b""
                _handle_arc_record(f, header, index, offset, read, config)
                yield from read.full_batch()
            except (OSError, EOFError, zlib.error) as exc:
                if read.records == index:  # damage found while looking for the record's header
                    read.records += 1
                reason = "truncated_record" if isinstance(exc, EOFError) else "corrupt_gzip"
                read.quarantine_record(index, reason, f"{exc}; the rest of the file skipped")
                return


def _arc_line(f) -> bytes:
    """The next record header line, past the newlines that separate records."""
    line = f.readline(_ARC_LINE_LIMIT)
    while line in (b"\n", b"\r\n"):
        line = f.readline(_ARC_LINE_LIMIT)
    return line


def _skip_to_arc_header(f) -> tuple[bytes, int]:
    """Past a malformed record: the next line that is, or looks like, a record header, and the bytes skipped."""
    skipped = 0
    while line := f.readline(_ARC_LINE_LIMIT):
        if _ARC_HEADER_LIKE.fullmatch(line.decode("utf-8", "replace")):
            return line, skipped
        skipped += len(line)
    return b"", skipped


def _handle_arc_record(f, header: re.Match, index: int, offset, read: ShardRead, config: ReaderConfig) -> None:
    url, _, date, content_type, length = header.groups()
    length = int(length)
    fetched_at = f"{date[:4]}-{date[4:6]}-{date[6:8]}T{date[8:10]}:{date[10:12]}:{date[12:]}Z"
    if length > config.max_doc_bytes:
        f.seek(length, 1)
        read.quarantine_record(index, "oversize", f"record larger than {config.max_doc_bytes} bytes", offset, url)
        return
    block = f.read(length)
    if len(block) < length:
        read.quarantine_record(index, "truncated_record", f"{len(block)} of {length} bytes present", offset, url)
    elif url.startswith("filedesc:"):
        read.drop(index, "not_a_document:filedesc")
    elif block.startswith(b"HTTP/"):
        _keep_http_response(read, index, url, fetched_at, block, offset, config)
    else:
        _keep_payload(read, index, url, fetched_at, content_type, block, offset, config)


# JSONL ----------------------------------------------------------------------------------------
def _read_jsonl(path: Path, read: ShardRead, config: ReaderConfig) -> Iterator[pl.DataFrame]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for line in f:
                index = read.records
                read.records += 1
                _handle_jsonl_line(line, index, read, config)
                yield from read.full_batch()
    except (OSError, EOFError, zlib.error) as exc:
        index = read.records
        read.records += 1
        read.quarantine_record(index, "corrupt_gzip", f"{exc} after {index} lines")


def _handle_jsonl_line(line: bytes, index: int, read: ShardRead, config: ReaderConfig) -> None:
    if not line.strip():
        read.drop(index, "blank_line")
        return
    if len(line) > config.max_doc_bytes:
        read.quarantine_record(index, "oversize", f"line larger than {config.max_doc_bytes} bytes")
        return
    try:
        obj = loads(line)
    except UnicodeDecodeError as exc:
        read.quarantine_record(index, "undecodable", f"{exc.encoding}: {exc.reason} at byte {exc.start}")
        return
    except json.JSONDecodeError as exc:
        read.quarantine_record(index, "malformed_json", f"line {index + 1}: {exc.msg} at column {exc.colno}")
        return
    if not isinstance(obj, dict):
        read.quarantine_record(index, "malformed_json", f"line {index + 1}: not a JSON object")
        return
    text = obj.get(config.text_field)
    url = obj.get(config.url_field)
    if url is not None and not isinstance(url, str):
        read.quarantine_record(index, "bad_url", f"line {index + 1}: {_not_a_string(config.url_field, url)}")
        return
    if not isinstance(text, str):
        read.quarantine_record(index, "missing_text", f"no string field {config.text_field!r}", url=url)
        return
    fetched_at = obj.get("fetched_at") or obj.get("date")
    read.keep(index, url, str(fetched_at) if fetched_at else None, "text/plain", text=text)


def _not_a_string(field: str, value) -> str:
    return f"{field} is a {type(value).__name__}, not a string: {str(value)[:200]}"


# Parquet --------------------------------------------------------------------------------------
def _read_parquet(path: Path, read: ShardRead, config: ReaderConfig) -> Iterator[pl.DataFrame]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise ValueError(f"{path.name}: not a readable Parquet file: {exc}") from exc
    if config.text_field not in schema.names:
        raise ValueError(
            f"{path.name}: Parquet shard has no text column {config.text_field!r} "
            f"(columns: {', '.join(schema.names)}); set the reader's text_field to the right column"
        )
    columns = [c for c in (config.text_field, config.url_field, "fetched_at") if c in schema.names]
    i = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=read.batch_rows, columns=list(dict.fromkeys(columns))):
        table = pl.from_arrow(batch)
        urls = table[config.url_field].to_list() if config.url_field in table.columns else [None] * len(table)
        dates = table["fetched_at"].cast(pl.String).to_list() if "fetched_at" in table.columns else None
        for row, (text, url) in enumerate(zip(table[config.text_field].to_list(), urls)):
            index = read.records
            read.records += 1
            if url is not None and not isinstance(url, str):
                read.quarantine_record(index, "bad_url", f"row {i}: {_not_a_string(config.url_field, url)}")
            elif not isinstance(text, str):
                read.quarantine_record(index, "missing_text", f"row {i}: null or non-string text", url=url)
            elif len(text.encode("utf-8", "surrogatepass")) > config.max_doc_bytes:
                read.quarantine_record(index, "oversize", f"row {i}: text larger than {config.max_doc_bytes} bytes", url=url)
            else:
                read.keep(index, url, dates[row] if dates else None, "text/plain", text=text)
            i += 1
        yield from read.full_batch()
