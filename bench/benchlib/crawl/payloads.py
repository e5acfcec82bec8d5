"""The other responses a crawl carries, so that readers must skip them: images, PDFs, error pages, redirects."""

from __future__ import annotations

import html
import random
import re
import struct
import zlib


def png(rng: random.Random, width: int = 8, height: int = 8, step: int = 0) -> bytes:
    """A valid RGB PNG: a random colour whose red grows by `step` a column and green by `step` a row."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    red, green, blue = (rng.randrange(256) for _ in range(3))
    rows = b"".join(
        b"\x00" + b"".join(bytes(((red + step * x) % 256, (green + step * y) % 256, blue)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def pdf(title: str, media_box: tuple[int, int] = (612, 792), top: int = 720) -> bytes:
    """A one-page PDF that shows `title` with its baseline `top` points up the page."""
    text = re.sub(r"[^A-Za-z0-9 .,_-]", "", title)[:60] or "Document"
    return one_page_pdf(f"BT /F1 18 Tf 72 {top} Td ({text}) Tj ET".encode(), media_box)


def one_page_pdf(content: bytes, media_box: tuple[int, int]) -> bytes:
    """A valid PDF of one page of `media_box` points whose content stream is `content` (Helvetica as F1)."""
    width, height = media_box
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>"
        % (width, height),
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def not_found(path: str, server: str, host: str) -> bytes:
    return (
        "<!DOCTYPE HTML>\n<html><head><title>404 Not Found</title></head><body>\n<h1>Not Found</h1>\n"
        f"<p>The requested URL {html.escape(path)} was not found on this server.</p>\n<hr>\n"
        f"<address>{html.escape(server)} Server at {html.escape(host)} Port 443</address>\n</body></html>\n"
    ).encode()


def moved(location: str) -> bytes:
    return (
        "<!DOCTYPE HTML>\n<html><head><title>301 Moved Permanently</title></head><body>\n<h1>Moved Permanently</h1>\n"
        f'<p>The document has moved <a href="{html.escape(location)}">here</a>.</p>\n</body></html>\n'
    ).encode()
