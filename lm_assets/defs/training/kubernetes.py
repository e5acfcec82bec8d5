"""Training on a Kubernetes cluster: a Kubeflow PyTorchJob generated from the same config, talking
Dagster Pipes through S3 (context in, messages out), with only rank 0 writing.

`pytorch_job_manifest` is pure: the manifest's content is tested without a cluster.
`KubernetesTrainingClient.run` opens the Pipes session, creates the job through the Kubernetes API
(`CustomObjectsApi`, or any object with the same two methods), waits for it, and returns what rank 0
reported.
"""

import json
import time

import dagster as dg
from pydantic import Field

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


class ClusterSpec(dg.Config):
    """The cluster a PyTorchJob runs on: the `cluster` part of the training_launcher resource."""

    image: str = Field(default="lm-assets:latest", description="the container image every pod runs")
    namespace: str = Field(default="default", description="the Kubernetes namespace of the job and its ConfigMap")
    nodes: int = Field(default=1, description="pods: one Master and nodes - 1 Workers, one torchrun each")
    gpus_per_node: int = Field(default=8, description="GPUs each pod requests, and torchrun's processes per pod")
    pvc_name: str = Field(
        default="lm-assets-data", description="the PersistentVolumeClaim holding the storage root, mounted on every pod"
    )
    data_mount: str = Field(default="/data", description="where the storage root volume is mounted in the pods")
    config_mount: str = Field(default="/etc/lm-assets", description="where the train config's ConfigMap is mounted")
    service_account: str = Field(default="lm-assets", description="the pods' Kubernetes service account")
    env: dict[str, str] = Field(default={}, description="extra environment variables for every pod")


def pytorch_job_manifest(name: str, train_config: dict, cluster: ClusterSpec, pipes_env: dict[str, str]) -> dict:
    """A PyTorchJob (Master + Workers) that runs `lm_assets.training.train` under torchrun on every node,
    and the ConfigMap holding its train config."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "namespace": cluster.namespace},
        "data": {"train.json": json.dumps(train_config, indent=2)},
    }
    command = [
        "torchrun", f"--nnodes={cluster.nodes}", f"--nproc_per_node={cluster.gpus_per_node}",
        "-m", "lm_assets.training.train", "--config", f"{cluster.config_mount}/train.json",
    ]
    env = {"OMP_NUM_THREADS": "1", "LM_ASSETS_PIPES_MESSAGES": "s3", **cluster.env, **pipes_env}
    container = {
        "name": "pytorch",
        "image": cluster.image,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": {"limits": {"nvidia.com/gpu": cluster.gpus_per_node}},
        "volumeMounts": [
            {"name": "data", "mountPath": cluster.data_mount},
            {"name": "config", "mountPath": cluster.config_mount, "readOnly": True},
        ],
    }
    pod = {
        "spec": {
            "serviceAccountName": cluster.service_account,
            "restartPolicy": "OnFailure",
            "containers": [container],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": cluster.pvc_name}},
                {"name": "config", "configMap": {"name": f"{name}-config"}},
            ],
        }
    }
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod}}
    if cluster.nodes > 1:
        replicas["Worker"] = {"replicas": cluster.nodes - 1, "restartPolicy": "OnFailure", "template": pod}
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": {"app": "lm-assets", "lm-assets/workload": "training"}},
        "spec": {"runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3}, "pytorchReplicaSpecs": replicas},
    }
    return {"config_map": config_map, "job": job}


def job_state(job: dict) -> str | None:
    """'Succeeded', 'Failed', or None while the job runs, from the PyTorchJob's conditions."""
    for condition in reversed(job.get("status", {}).get("conditions", [])):
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
            return condition["type"]
    return None


class KubernetesTrainingClient:
    """Creates the job and waits for it; `api` is a `kubernetes.client.CustomObjectsApi` by default."""

    def __init__(self, s3_client, pipes_bucket: str, api=None, core_api=None, poll_seconds: float = 10.0):
        self.s3 = s3_client
        self.bucket = pipes_bucket
        self.api = api
        self.core_api = core_api
        self.poll_seconds = poll_seconds

    def _apis(self):
        if self.api is None or self.core_api is None:
            from kubernetes import client, config

            config.load_incluster_config() if _in_cluster() else config.load_kube_config()
            self.api, self.core_api = client.CustomObjectsApi(), client.CoreV1Api()
        return self.api, self.core_api

    def run(self, context, name: str, train_config: dict, cluster: ClusterSpec, timeout_s: float = 7 * 24 * 3600):
        from dagster_aws.pipes import PipesS3ContextInjector, PipesS3MessageReader

        api, core = self._apis()
        with dg.open_pipes_session(
            context=context,
            context_injector=PipesS3ContextInjector(bucket=self.bucket, client=self.s3),
            message_reader=PipesS3MessageReader(bucket=self.bucket, client=self.s3, interval=1),
        ) as session:
            manifest = pytorch_job_manifest(name, train_config, cluster, session.get_bootstrap_env_vars())
            core.create_namespaced_config_map(cluster.namespace, manifest["config_map"])
            api.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, manifest["job"])
            context.log.info(f"created PyTorchJob {cluster.namespace}/{name} ({cluster.nodes} x {cluster.gpus_per_node} GPUs)")
            deadline = time.monotonic() + timeout_s
            while (state := job_state(api.get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, name))) is None:
                if time.monotonic() > deadline:
                    raise dg.Failure(f"PyTorchJob {name} did not finish within {timeout_s} s")
                time.sleep(self.poll_seconds)
            if state == "Failed":
                raise dg.Failure(f"PyTorchJob {cluster.namespace}/{name} failed; rank 0's error is in the Pipes messages above")
        return session.get_results()


def _in_cluster() -> bool:
    import os

    return "KUBERNETES_SERVICE_HOST" in os.environ
