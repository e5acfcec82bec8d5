"""The DuckDB session every dedup step runs in: a memory limit, a spill folder, tables registered
by name; and polars scans of the same sources."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    pass

from lm_assets.corpus.dedup.config import DuckDBConfig, Source


class DuckDBSession:
    """A DuckDB connection with a memory limit and a spill folder; tables are registered by name."""

    def __init__(self, cfg: DuckDBConfig):
        temp = cfg.temp_directory or os.path.join(tempfile.gettempdir(), "lm-assets-duckdb")
        Path(temp).mkdir(parents=True, exist_ok=True)
        import duckdb  # imported on first use: the code location loads this module

        self.con = duckdb.connect()
        self._set("memory_limit", cfg.memory_limit)
        self._set("temp_directory", temp)
        # Without insertion order DuckDB can stream and spill large joins and aggregates.
        self.con.execute("SET preserve_insertion_order = false").fetchall()
        if cfg.threads:
            self.con.execute(f"SET threads = {int(cfg.threads)}").fetchall()

    def _set(self, name: str, value: str) -> None:
        self.con.execute(f"SET {name} = '{str(value).replace(chr(39), chr(39) * 2)}'").fetchall()

    def table(self, name: str, source: Source, columns: Sequence[str]) -> str:
        """A FROM-clause expression reading `columns` of `source`."""
        import pyarrow as pa

        if isinstance(source, pl.DataFrame):
            self.con.register(name, source.select(columns).to_arrow())
            return name
        if isinstance(source, pa.Table):
            self.con.register(name, source.select(list(columns)))
            return name
        paths = [source] if isinstance(source, (str, Path)) else list(source)
        quoted = ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths)
        return f"(SELECT {', '.join(columns)} FROM read_parquet([{quoted}]))"

    def query(self, sql: str) -> pl.DataFrame:
        return self.con.sql(sql).pl()

    def batches(self, sql: str, rows: int) -> Iterator:
        """The query's result as pyarrow record batches of at most `rows` rows, streamed."""
        yield from self.con.sql(sql).to_arrow_reader(rows)

    def __enter__(self) -> DuckDBSession:
        return self

    def __exit__(self, *exc) -> None:
        self.con.close()


def lazy(source: Source) -> pl.LazyFrame:
    import pyarrow as pa

    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pa.Table):
        return pl.from_arrow(source).lazy()
    paths = [source] if isinstance(source, (str, Path)) else list(source)
    return pl.scan_parquet([str(p) for p in paths])
