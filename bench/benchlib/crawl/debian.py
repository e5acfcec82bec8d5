"""Pages from Debian documentation packages: each package is one site, its HTML files its pages.

A package's .deb comes from a cache folder, or from `apt-get download` into it; it is unpacked once with
`dpkg-deb -x` under `<cache>/unpacked/`, or some of its files are read in Python (`read_deb`). The site's root
is the common folder of the package's HTML files (regular files; symlinks are skipped), and a page's URL is
`https://<package>.example/<path under the root>`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

DEFAULT_CACHE = Path("~/.cache/lm-bench-debs").expanduser()


@dataclass(frozen=True)
class SourcePage:
    site: str  # the package
    url: str
    file: Path


@dataclass(frozen=True)
class Package:
    name: str
    deb: Path
    version: str
    root: Path  # the site root inside the unpacked tree
    pages: tuple[SourcePage, ...]
    images: tuple[tuple[str, Path], ...]  # (url, file)

    def manifest(self) -> dict:
        return {
            "name": self.name, "deb": self.deb.name, "version": self.version,
            "sha256": hashlib.sha256(self.deb.read_bytes()).hexdigest(), "html_files": len(self.pages),
        }


def host(package: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", package.lower()).strip("-") + ".example"


def url_path(relative: str) -> str:
    return quote(relative, safe="/-._~")


def files(top: Path, suffix: str) -> list[Path]:
    """Regular files (no symlinks) under `top` whose names end in `suffix`, sorted by path."""
    found = []
    for folder, subfolders, names in os.walk(top):
        subfolders.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if name.lower().endswith(suffix) and path.is_file() and not path.is_symlink():
                found.append(path)
    return sorted(found)


def site_pages(name: str, tree: Path) -> tuple[Path, list[SourcePage], list[tuple[str, Path]]]:
    """(site root, pages, images) of one unpacked tree or folder of HTML files."""
    pages = files(tree, ".html")
    root = Path(os.path.commonpath([str(page.parent) for page in pages])) if pages else tree
    site = host(name)
    source = [SourcePage(name, f"https://{site}/{url_path(page.relative_to(root).as_posix())}", page) for page in pages]
    images = []
    for image in files(tree, ".png"):
        relative = image.relative_to(root).as_posix() if image.is_relative_to(root) else "images/" + image.name
        images.append((f"https://{site}/{url_path(relative)}", image))
    return root, source, images


def package(name: str, cache: Path = DEFAULT_CACHE) -> Package:
    deb = cached_deb(name, cache)
    root, pages, images = site_pages(name, unpacked(deb, cache))
    return Package(name, deb, deb_field(deb, "Version"), root, tuple(pages), tuple(images))


def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as missing:
        raise RuntimeError(f"{command[0]} is not installed: put the .deb files in the cache folder instead") from missing


def cached_deb(name: str, cache: Path, version: str | None = None) -> Path:
    """`<name>_<version>_*.deb` from `cache`, downloaded with apt-get if it is not there. Without a `version`, or
    when apt-get cannot find it (with a warning), the newest `<name>_*.deb` in `cache`, downloaded (after one
    `apt-get update`) if none is."""
    cache.mkdir(parents=True, exist_ok=True)
    if version is not None:
        pinned = f"{name}_{version.replace(':', '%3a')}_*.deb"
        if not list(cache.glob(pinned)):
            run(["apt-get", "download", f"{name}={version}"], cwd=cache)
        found = sorted(cache.glob(pinned))
        if found:
            return found[0]
    found = list(cache.glob(f"{name}_*.deb"))
    if not found:
        done = run(["apt-get", "download", name], cwd=cache)
        if done.returncode != 0:
            run(["apt-get", "update"])
            done = run(["apt-get", "download", name], cwd=cache)
        found = list(cache.glob(f"{name}_*.deb"))
        if done.returncode != 0 or not found:
            raise RuntimeError(f"apt-get download {name} failed: {done.stderr.strip()[-2000:]}")
    newest = max(found, key=functools.cmp_to_key(compare_versions))
    if version is not None:
        print(f"warning: {name} {version} unavailable, using {newest.name}", file=sys.stderr)
    return newest


def compare_versions(a: Path, b: Path) -> int:
    va, vb = deb_field(a, "Version"), deb_field(b, "Version")
    if va == vb:
        return 0
    return 1 if run(["dpkg", "--compare-versions", va, "gt", vb]).returncode == 0 else -1


@functools.cache
def deb_field(deb: Path, field: str) -> str:
    done = run(["dpkg-deb", "-f", str(deb), field])
    return done.stdout.strip() if done.returncode == 0 else ""


def unpacked(deb: Path, cache: Path) -> Path:
    """`deb` unpacked under `<cache>/unpacked/`, reused once complete."""
    target = cache / "unpacked" / deb.name.removesuffix(".deb")
    if (target / ".complete").exists():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.mkdir(parents=True)
    done = run(["dpkg-deb", "-x", str(deb), str(partial)])
    if done.returncode != 0:
        raise RuntimeError(f"dpkg-deb -x {deb} failed: {done.stderr.strip()[-2000:]}")
    (partial / ".complete").write_text("ok\n")
    partial.rename(target)
    return target


def read_deb(deb: Path, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The regular files of `deb` (an ar archive holding data.tar.*) whose paths, without a leading `./`,
    `wanted` accepts; read in Python, so no dpkg is needed."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb} is not a Debian package")
    position, tar_bytes = 8, None
    while position + 60 <= len(data):
        member = data[position : position + 16].decode().strip().rstrip("/")
        size = int(data[position + 48 : position + 58].decode().strip())
        if member.startswith("data.tar"):
            tar_bytes = data[position + 60 : position + 60 + size]
        position += 60 + size + (size % 2)
    if tar_bytes is None:
        raise ValueError(f"{deb} has no data.tar member")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as tar:
        for member in tar:
            path = member.name.lstrip("./")
            if member.isfile() and wanted(path):
                files[path] = tar.extractfile(member).read()
    return files
