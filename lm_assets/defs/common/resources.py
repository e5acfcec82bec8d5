"""Where data lives: the storage root every stage writes under, and the landing location shards arrive in; and
the toxicity model (lm_assets/defs/common/toxicity.py).

Nothing here reads the environment when it is imported: a field left unset takes its environment
default when the resource is used, and a relative path resolves against the project folder
(lm_assets/defs/common/environment.py). S3 credentials come from boto3's own chain (environment, shared
profile, instance or pod role), or from `dg.EnvVar`-bound fields of `S3ClientResource`; they are never
written into code or config files.
"""


from typing import ClassVar

import dagster as dg
from pydantic import Field

from lm_assets.defs.common.environment import from_environment, project_path, unset_means
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.storage.store import Storage

# Their defaults are the registry's (lm_assets/defs/common/environment.py).
STORAGE_ROOT_VARIABLE = "LM_ASSETS_STORAGE_ROOT"
LANDING_ROOT_VARIABLE = "LM_ASSETS_LANDING_ROOT"


class S3ClientResource(dg.ConfigurableResource):
    """An S3 client with dagster-aws's `S3Resource` settings, made by its `construct_s3_client` when a
    client is needed (dagster-aws costs a second to import, so not when the code location loads). An
    unset endpoint or region is read then: $LM_ASSETS_S3_ENDPOINT_URL, and $AWS_REGION or
    $AWS_DEFAULT_REGION. Credentials can be bound with `dg.EnvVar`."""

    use_unsigned_session: bool = Field(default=False, description="an unsigned S3 session")
    region_name: str | None = Field(default=None, description="unset: $AWS_REGION, else $AWS_DEFAULT_REGION")
    endpoint_url: str | None = Field(default=None, description="unset: $LM_ASSETS_S3_ENDPOINT_URL, else AWS")
    max_attempts: int = Field(default=5, description="boto3's retry attempts, the first call included")
    profile_name: str | None = Field(default=None, description="a shared-credentials profile")
    use_ssl: bool = Field(default=True, description="use SSL")
    verify: bool | None = Field(default=None, description="verify SSL certificates (unset: yes)")
    aws_access_key_id: str | None = Field(default=None, description="unset: boto3's credential chain")
    aws_secret_access_key: str | None = Field(default=None, description="unset: boto3's credential chain")
    aws_session_token: str | None = Field(default=None, description="unset: boto3's credential chain")

    def get_client(self):
        from dagster_aws.s3.utils import construct_s3_client

        return construct_s3_client(
            max_attempts=self.max_attempts,
            region_name=from_environment(self.region_name or None, "AWS_REGION",
                                         from_environment(None, "AWS_DEFAULT_REGION")),
            endpoint_url=from_environment(self.endpoint_url or None, "LM_ASSETS_S3_ENDPOINT_URL"),
            use_unsigned_session=self.use_unsigned_session,
            profile_name=self.profile_name,
            use_ssl=self.use_ssl,
            verify=self.verify,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token,
        )


def s3_resource_from_env() -> S3ClientResource:
    """The S3 resource whose endpoint and region come from the environment when it is used."""
    return S3ClientResource()


def _storage(root: str, s3: S3ClientResource) -> Storage:
    if root.startswith("s3://"):
        return Storage(root, s3_client=s3.get_client())
    return Storage(project_path(root))


class StorageResource(dg.ConfigurableResource):
    """The storage root: a local folder or `s3://bucket/prefix`. Unset, it is $LM_ASSETS_STORAGE_ROOT,
    else `storage`; a relative folder is inside the project folder, whatever the working directory."""

    root: str | None = Field(
        default=None,
        description="a local folder (relative: inside the project folder) or s3://bucket/prefix; "
        + unset_means(STORAGE_ROOT_VARIABLE, resolve=project_path),
    )
    s3: dg.ResourceDependency[S3ClientResource] = Field(description="the S3 client used when root is an s3:// URL")
    environment_variable: ClassVar[str] = STORAGE_ROOT_VARIABLE

    def storage(self) -> Storage:
        return _storage(from_environment(self.root or None, self.environment_variable), self.s3)


class LandingResource(StorageResource):
    """Where new shard files arrive: a local folder or `s3://bucket/prefix`. Unset, it is
    $LM_ASSETS_LANDING_ROOT, else the shipped sample crawl; a relative folder is inside the project folder."""

    root: str | None = Field(
        default=None,
        description="a local folder (relative: inside the project folder) or s3://bucket/prefix; "
        + unset_means(LANDING_ROOT_VARIABLE, resolve=project_path),
    )
    settle_s: float = Field(
        default=60.0,
        description="a file is taken as a shard once unchanged (size and modification time) this many seconds, "
        "or at once when `<name>.done` lies beside it; a writer can also rename a finished file into place from "
        "a hidden name (`.name.part`); 0: at once",
    )
    follow_links_outside: bool = Field(
        default=False,
        description="follow symlinks that lead outside the landing root; off, such files are skipped by the "
        "sensor and refused by raw_shard",
    )
    environment_variable: ClassVar[str] = LANDING_ROOT_VARIABLE

    def storage(self) -> Storage:
        store = super().storage()
        store.confine_links = not self.follow_links_outside and not store.is_s3
        return store


def default_resources(s3: S3ClientResource | None = None, toxicity: ToxicityResource | None = None) -> dict:
    """The resources every domain shares: the storage root, the landing location and the toxicity model. A
    domain's Definitions adds those it owns (lm_assets/defs/<domain>/definitions.py)."""
    s3 = s3 or s3_resource_from_env()
    return {
        "storage": StorageResource(s3=s3),
        "landing": LandingResource(s3=s3),
        "toxicity": toxicity or ToxicityResource(),
    }
