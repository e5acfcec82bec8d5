"""How the pipeline holds up when its input is damaged and its processes are killed. It prints figures;
it checks nothing. The last line is a JSON object, also written to `$OUT/reliability.json`.

1. Records recovered against warcio. Damaged WARC and ARC files built here (stray bytes between two
   records, at every record boundary, gzip and plain; a damaged gzip member; malformed HTTP status
   lines; malformed ARC headers), and with `--warcs DIR` every WARC/ARC file in DIR (pywb's
   `sample_archive/warcs`, say): per file, the records warcio's ArchiveIterator reads before it gives
   up, and ours: records counted, documents, dropped, quarantined.
2. Publishes killed. A partition is published, then a second publish of it is SIGKILLed at each point
   (mid-write, before the folder exchange, after it, and between the two renames of the fallback),
   `--kills` times each: how many left a whole, readable partition (the earlier set or the new one,
   never a mix, never none), and how many the next publish swept clean.
3. A killed run's slot. A run of a sleeping job on a SQLite instance (deploy/dagster.yaml) in a process
   of its own, and the real `dagster-daemon run` on workspace.yaml; once the daemon has ticked
   run_worker_sensor, the run's process is SIGKILLed: the seconds until the run is FAILURE, so that its
   slot is free. `--smoke` skips it (a minute or two).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

from benchlib.faults import KILLED_AT, POINTS
from benchlib.paths import REPO, write_report

sys.path.insert(0, str(REPO))  # tests.support: the WARC builder the reader tests use

ARTICLE = "<p>" + "The harbour pilots guide every ship through the narrow channel at dawn. " * 20 + "</p>"


def page(title: str) -> str:
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{ARTICLE}</body></html>"


def warc(records: int, gzipped: bool) -> tuple[bytes, list[int]]:
    from tests.support.warc_builder import WarcBuilder  # warcio's writer, with each record's offset

    builder = WarcBuilder(gzip=gzipped)
    for i in range(records):
        builder.response(f"https://a.example/{i}", page(f"p{i}"))
    return builder.buf.getvalue(), builder.offsets


def raw_response(url: str, block: bytes) -> bytes:
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: {url}\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
            f"WARC-Record-ID: <urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>\r\n"
            f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def damaged_files(folder: Path) -> list[Path]:
    files = []
    for gzipped in (True, False):
        data, offsets = warc(6, gzipped)
        suffix = ".warc.gz" if gzipped else ".warc"
        for boundary in range(1, 6):
            damaged = bytearray(data)
            damaged[offsets[boundary]:offsets[boundary]] = b"xyz"
            files.append(folder / f"stray-before-{boundary}{suffix}")
            files[-1].write_bytes(bytes(damaged))
    data, offsets = warc(6, True)
    damaged = bytearray(data)
    damaged[offsets[2] + 40:offsets[2] + 80] = b"A" * 40
    files.append(folder / "damaged-member-2.warc.gz")
    files[-1].write_bytes(bytes(damaged))
    head = b"\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + page("x").encode()
    files.append(folder / "malformed-http.warc")
    files[-1].write_bytes(b"".join(raw_response(f"https://h.example/{name}", status + head) for name, status in (
        ("lower", b"http/1.1 200 OK"), ("crlf", b"\r\nHTTP/1.1 200 OK"), ("httpx", b"HTTPX/1.1 200 OK"),
        ("ok", b"HTTP/1.1 200 OK"))))
    files.append(folder / "malformed-headers.arc")
    files[-1].write_bytes(
        b"filedesc://bad.arc 127.0.0.1 20140301000000 text/plain -1\n1 0 Bad\nURL IP-address Archive-date\n\n"
        b"http://a.example/ 192.0.2.1 201404010000000000 text/html -1\n\n"
        b"http://a.example/ 192.0.2.1 20140401000000 text/html abc\n")
    return files


def warcio_records(path: Path) -> tuple[int, str]:
    from warcio.archiveiterator import ArchiveIterator

    count = 0
    try:
        with open(path, "rb") as f:
            for _ in ArchiveIterator(f, arc2warc=True):
                count += 1
    except Exception as exc:  # noqa: BLE001 - where warcio gives up is the figure
        return count, type(exc).__name__
    return count, ""


def recovery(files: list[Path]) -> list[dict]:
    from lm_assets.corpus.ingest.readers import read_shard

    rows = []
    for path in files:
        theirs, error = warcio_records(path)
        shard = read_shard(path)
        rows.append({"file": path.name, "warcio_records": theirs, "warcio_error": error, "records": shard.records,
                     "documents": shard.documents.height, "dropped": shard.dropped.height,
                     "quarantined": shard.quarantine.height,
                     "reasons": sorted(set(shard.quarantine["reason"].to_list()))})
    return rows




def killed_publishes(work: Path, kills: int) -> dict:
    import lm_assets.storage.store as store_module
    from lm_assets.storage.store import Storage

    figures = {}
    for point in POINTS:
        whole = swept = readable_at_once = 0
        for attempt in range(kills):
            root = work / f"{point}-{attempt}"
            store = Storage(str(root))
            store.publish("stage/s1", {"a.json": b"old", "b.json": b"old"})
            subprocess.run([sys.executable, "-c", KILLED_AT, str(root), point], capture_output=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
            files = {key: store.read_bytes(key) for key in store.list("stage")}
            readable_at_once += len(files) == 2 and len(set(files.values())) == 1
            saved, store_module.LEFTOVER_AFTER_S = store_module.LEFTOVER_AFTER_S, 0
            try:
                store_module.sweep_leftovers(root / "stage" / "s1")
            finally:
                store_module.LEFTOVER_AFTER_S = saved
            files = {key: store.read_bytes(key) for key in store.list("stage")}
            whole += len(files) == 2 and len(set(files.values())) == 1
            swept += not [p for p in root.rglob("*") if p.name.startswith(".")]
        figures[point] = {"kills": kills, "whole_right_after": readable_at_once, "whole_after_sweep": whole,
                          "swept_clean": swept}
    return figures


SLEEPER = textwrap.dedent("""
    import sys, time
    import dagster as dg

    @dg.asset
    def slow_asset():
        time.sleep(600)

    dg.materialize([slow_asset], instance=dg.DagsterInstance.from_config(sys.argv[1]))
""")


def killed_run_slot(work: Path, timeout_s: float) -> dict:
    import dagster as dg

    home = work / "home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    instance = dg.DagsterInstance.from_config(str(home))
    worker = subprocess.Popen([sys.executable, "-c", SLEEPER, str(home)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
    while not instance.get_runs(started):
        time.sleep(0.2)
    [run] = instance.get_runs(started)
    daemon = subprocess.Popen([str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env=env, cwd=REPO, stdout=open(work / "daemon.log", "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        # Killed after the sensor's first tick, so that the figure includes waiting for the next one.
        deadline = time.monotonic() + timeout_s
        while "run_worker_sensor" not in (work / "daemon.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        killed = time.monotonic()
        while time.monotonic() - killed < timeout_s:
            if instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE:
                return {"seconds_to_failure": round(time.monotonic() - killed, 1), "run": run.run_id}
            time.sleep(1)
        return {"seconds_to_failure": None, "run": run.run_id, "timeout_s": timeout_s}
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warcs", type=Path, help="also read every .warc/.arc (.gz) file of this folder")
    parser.add_argument("--kills", type=int, default=10, help="kills at each point of a publish")
    parser.add_argument("--slot-timeout", type=float, default=600, help="seconds to wait for a killed run to fail")
    parser.add_argument("--smoke", action="store_true", help="one kill a point, no daemon: seconds")
    args = parser.parse_args()
    if args.smoke:
        args.kills = 1
    report = {}
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        work = Path(tmp)
        (work / "files").mkdir()
        files = damaged_files(work / "files")
        if args.warcs:
            files += sorted(p for p in args.warcs.iterdir() if p.name.lower().endswith((".warc", ".warc.gz", ".arc", ".arc.gz")))
        report["recovery"] = recovery(files)
        print(f"{'file':40} {'warcio':>7}  {'ours: records':>13} {'docs':>5} {'dropped':>8} {'quarantined':>12}")
        for row in report["recovery"]:
            print(f"{row['file'][:40]:40} {row['warcio_records']:>7}  {row['records']:>13} {row['documents']:>5} "
                  f"{row['dropped']:>8} {row['quarantined']:>12}  {' '.join(row['reasons'])}"
                  + (f"  (warcio: {row['warcio_error']})" if row["warcio_error"] else ""))
        short = [row["file"] for row in report["recovery"] if row["records"] < row["warcio_records"]]
        print(f"files where ours counts fewer records than warcio reads: {len(short)} of {len(files)} {short or ''}")
        (work / "publish").mkdir()
        report["killed_publishes"] = killed_publishes(work / "publish", args.kills)
        print("\npublish killed at        kills  whole right after  whole after the sweep  swept clean")
        for point, row in report["killed_publishes"].items():
            print(f"  {point:22} {row['kills']:5}  {row['whole_right_after']:17}  {row['whole_after_sweep']:21}  "
                  f"{row['swept_clean']:11}")
        if not args.smoke:
            (work / "slot").mkdir()
            report["killed_run"] = killed_run_slot(work / "slot", args.slot_timeout)
            print(f"\na run whose worker was SIGKILLed was failed by the daemon (run_worker_sensor) after "
                  f"{report['killed_run']['seconds_to_failure']} s")
    write_report("reliability.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
