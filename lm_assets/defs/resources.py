"""Where data lives: the storage root every stage writes under, and the landing location shards arrive in."""


import os

import dagster as dg
from dagster_aws.s3 import S3Resource

from lm_assets.corpus.storage import Storage

DEFAULT_STORAGE_ROOT = "storage"
DEFAULT_LANDING_ROOT = "data/sample-crawl"


def s3_resource_from_env() -> S3Resource:
    return S3Resource(
        endpoint_url=os.environ.get("LM_ASSETS_S3_ENDPOINT_URL") or None,
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
    )


class StorageResource(dg.ConfigurableResource):
    """The storage root: a local folder (relative paths resolve against the working directory) or
    `s3://bucket/prefix`. Defaults to $LM_ASSETS_STORAGE_ROOT."""

    root: str = DEFAULT_STORAGE_ROOT
    s3: dg.ResourceDependency[S3Resource]

    def storage(self) -> Storage:
        if self.root.startswith("s3://"):
            return Storage(self.root, s3_client=self.s3.get_client())
        return Storage(os.path.abspath(self.root))


class LandingResource(dg.ConfigurableResource):
    """Where new shard files arrive: a local folder or `s3://bucket/prefix`.
    Defaults to $LM_ASSETS_LANDING_ROOT."""

    root: str = DEFAULT_LANDING_ROOT
    s3: dg.ResourceDependency[S3Resource]

    def storage(self) -> Storage:
        if self.root.startswith("s3://"):
            return Storage(self.root, s3_client=self.s3.get_client())
        return Storage(os.path.abspath(self.root))


def default_resources() -> dict:
    from lm_assets.defs.dedup import DedupSettings
    from lm_assets.defs.training import TrainingLauncher

    s3 = s3_resource_from_env()
    return {
        "training_launcher": TrainingLauncher(
            backend=os.environ.get("LM_ASSETS_TRAINING_BACKEND", "local"),
            pipes_bucket=os.environ.get("LM_ASSETS_PIPES_BUCKET", ""),
            s3=s3,
        ),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
        "dedup": DedupSettings(duckdb_temp_directory=os.environ.get("LM_ASSETS_DUCKDB_TEMP_DIR") or None),
        "storage": StorageResource(root=os.environ.get("LM_ASSETS_STORAGE_ROOT", DEFAULT_STORAGE_ROOT), s3=s3),
        "landing": LandingResource(root=os.environ.get("LM_ASSETS_LANDING_ROOT", DEFAULT_LANDING_ROOT), s3=s3),
    }
