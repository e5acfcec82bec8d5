"""A publish killed at a chosen point: a script run as `python -c KILLED_AT <storage root> <point>`, which
publishes `stage/s1` (two files, `new`) and SIGKILLs itself at that point (`POINTS`): while writing
the second file, before the folder exchange, after it, or between the two renames of the fallback
used where the system cannot exchange folders. Shared by bench/reliability.py and the storage tests."""

import textwrap

KILLED_AT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import lm_assets.storage.store as store

    def die(*args):
        os.kill(os.getpid(), signal.SIGKILL)

    point = sys.argv[2]
    if point == "mid_write":
        write = Path.write_bytes
        Path.write_bytes = lambda self, data: die() if self.name == "b.json" else write(self, data)
    elif point == "before_exchange":
        store.exchange_folders = die
    elif point == "after_exchange":
        exchange = store.exchange_folders
        store.exchange_folders = lambda a, b: (exchange(a, b), die())
    elif point == "between_renames":
        store.exchange_folders = lambda a, b: False
        rename = os.rename
        os.rename = lambda a, b: (rename(a, b), die() if str(b).endswith(".retired") else None)
    store.Storage(sys.argv[1]).publish("stage/s1", {"a.json": b"new", "b.json": b"new"})
""")
POINTS = ("mid_write", "before_exchange", "after_exchange", "between_renames")
