"""The production instance's storage on one machine: a PostgreSQL server on 127.0.0.1, run from the
server binaries of the `pgserver` wheel (the dev extra), for `make ui-postgres` and the tests of
deploy/dagster-production.yaml."""

from __future__ import annotations

import socket
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

PRODUCTION_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "dagster-production.yaml"
HOST = "127.0.0.1"
USER = "postgres"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str = USER

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{self.user}@{self.host}:{self.port}/{database}"

    def new_database(self, name: str | None = None) -> str:
        """A database of that name (a fresh one by default), created when it does not exist."""
        import psycopg2

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        connection = psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname="postgres")
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()
        return name

    def environment(self, database: str) -> dict[str, str]:
        """The variables deploy/dagster-production.yaml reads for its storage."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USER": self.user,
                "DAGSTER_PG_PASSWORD": "unused-with-trust-auth", "DAGSTER_PG_DB": database}


def _pg_ctl():
    with warnings.catch_warnings():  # platformdirs warns at pgserver's import where XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from pgserver import _commands
    return _commands.pg_ctl


def _system_user(data: Path) -> str | None:
    """Initialize `data` with pgserver, which, run as root, makes a system user to run the server as."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    initial = pgserver.get_server(data, cleanup_mode="stop")
    user = initial.system_user
    initial.cleanup()
    return user


def running_port(data: Path) -> int | None:
    """The port of the server running on `data`, if one is (postmaster.pid's fourth line)."""
    import psutil

    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    return int(lines[3]) if len(lines) > 3 and psutil.pid_exists(int(lines[0])) else None


def start(data: Path, port: int | None = None) -> PostgresServer:
    """The PostgreSQL server of the data folder `data` (made on first use), listening on 127.0.0.1 only;
    the one already running there, if any."""
    if (running := running_port(data)) is not None:
        return PostgresServer(HOST, running)
    user = _system_user(data)
    port = port or free_port()
    _pg_ctl()(["-w", "-o", f"-h {HOST}", "-o", f"-p {port}", "-o", f"-k {data}", "-l", str(data / "log"), "start"],
                    pgdata=data, user=user, timeout=60)
    return PostgresServer(HOST, port)


def stop(data: Path) -> None:
    if running_port(data) is not None:
        _pg_ctl()(["-w", "-m", "fast", "stop"], pgdata=data, user=_system_user_of(data), timeout=60)


def _system_user_of(data: Path) -> str | None:
    import os
    import pwd

    owner = pwd.getpwuid(data.stat().st_uid).pw_name
    return owner if owner != pwd.getpwuid(os.getuid()).pw_name else None


@contextmanager
def server(folder: Path) -> Iterator[PostgresServer]:
    """A server on a fresh data folder under `folder`, stopped at the end."""
    data = folder / "pgdata"
    started = start(data)
    try:
        yield started
    finally:
        stop(data)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def instance_config(local_compute_logs: Path | None = None) -> dict:
    """deploy/dagster-production.yaml with the default run launcher in place of Kubernetes' (and, given a
    folder, compute logs there in place of S3): the production instance on one machine."""
    config = yaml.safe_load(PRODUCTION_CONFIG.read_text())
    config["run_launcher"] = {"module": "dagster.core.launcher", "class": "DefaultRunLauncher"}
    if local_compute_logs is not None:
        config["compute_logs"] = {"module": "dagster.core.storage.local_compute_log_manager",
                                  "class": "LocalComputeLogManager", "config": {"base_dir": str(local_compute_logs)}}
    return config


def prepare_home(home: Path) -> dict[str, str]:
    """For `make ui-postgres`: the server of `home/pgdata` started (or found running), its `lm_assets`
    database, and `home/dagster.yaml`; returns the environment the instance reads."""
    home.mkdir(parents=True, exist_ok=True)
    running = start(home / "pgdata")
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance_config(home / "compute_logs"), sort_keys=False))
    return {"DAGSTER_HOME": str(home), **running.environment(running.new_database("lm_assets"))}
