import os
import socket
import uuid
from dataclasses import dataclass

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_tests():
    """Whatever a test started and left running (a gRPC code server, a server's worker) is stopped when the
    tests of this process end, so that none outlives `make test`, its parent gone."""
    yield
    from lm_assets.app.process_tree import cmdline, descendants, stop_tree

    left = {pid: command for pid in descendants(os.getpid()) if (command := cmdline(pid))}
    if left:
        stop_tree(os.getpid(), grace_s=5, include_root=False)
        print(f"\nstopped {len(left)} processes the tests left running: {sorted(left.values())[:5]}")


@pytest.fixture
def stops_started_processes():
    """Stops, when the test ends, every process it started under this one and left running: a gRPC code
    server (closing its workspace asks it to shut down and does not wait), with the run workers under it."""
    from lm_assets.app.process_tree import descendants, stop_tree

    before = descendants(os.getpid())
    yield
    for pid in descendants(os.getpid()) - before:
        stop_tree(pid, grace_s=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    endpoint: str
    bucket: str


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3-protocol server on loopback (moto), with a fresh bucket of its own."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "LM_ASSETS_S3_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    bucket = f"lm-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    yield S3Server(endpoint=endpoint, bucket=bucket)
    server.stop()
