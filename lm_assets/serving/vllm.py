"""A vLLM Deployment and Service for Kubernetes serving an exported checkpoint (its Hugging Face folder).

    manifests = vllm_manifests(VllmSpec(name="lm", model="/models/dpo-step_00000030/hf", image=..., tensor_parallel=2,
                                        draft="/models/distill-step_00000200/hf"))

vLLM's OpenAI-compatible server (`vllm serve`) runs on the folder `lm_assets/training/export.py` writes, which
holds the weights, `config.json` and the tokenizer with its chat template. `tensor_parallel` sets
`--tensor-parallel-size` and the GPUs the pod asks for; a `draft` checkpoint turns on speculative
decoding (`--speculative-config` with `method: draft_model`). The checkpoints are read from a volume
(a PersistentVolumeClaim by default), mounted read-only at `mount`. vLLM's wheels need CUDA: the
manifests are tested against the Kubernetes schema here and run on a GPU cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PORT = 8000


@dataclass(frozen=True)
class VllmSpec:
    name: str
    model: str  # the exported folder, as the pod sees it (under `mount`)
    image: str = "vllm/vllm-openai:v0.34.0"
    namespace: str = "default"
    tensor_parallel: int = 1
    replicas: int = 1
    draft: str | None = None  # a smaller exported checkpoint proposing tokens (speculative decoding)
    speculative_tokens: int = 4
    max_model_len: int | None = None
    claim: str = "lm-assets-checkpoints"  # the PersistentVolumeClaim holding the checkpoints
    mount: str = "/models"
    served_name: str | None = None  # the model name clients ask for (default: `name`)

    def __post_init__(self):
        if self.tensor_parallel < 1 or self.replicas < 1 or self.speculative_tokens < 1:
            raise ValueError(f"tensor_parallel, replicas and speculative_tokens must be positive: {self}")
        for path in (self.model, self.draft):
            if path is not None and not path.startswith(self.mount.rstrip("/") + "/"):
                raise ValueError(f"{path} is not under the mounted {self.mount}")


def vllm_args(spec: VllmSpec) -> list[str]:
    args = ["vllm", "serve", spec.model, "--host", "0.0.0.0", "--port", str(PORT),
            "--served-model-name", spec.served_name or spec.name, "--tensor-parallel-size", str(spec.tensor_parallel)]  # fmt: skip
    if spec.max_model_len:
        args += ["--max-model-len", str(spec.max_model_len)]
    if spec.draft:
        speculative = {"method": "draft_model", "model": spec.draft, "num_speculative_tokens": spec.speculative_tokens}
        args += ["--speculative-config", json.dumps(speculative)]
    return args


def vllm_manifests(spec: VllmSpec) -> dict[str, dict]:
    """`{"deployment": ..., "service": ...}`: the objects to apply, as plain dicts."""
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": spec.name,
              "app.kubernetes.io/part-of": "lm-assets"}  # fmt: skip
    gpus = {"nvidia.com/gpu": spec.tensor_parallel}
    container = {
        "name": "vllm",
        "image": spec.image,
        "command": vllm_args(spec),
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": {"limits": gpus, "requests": gpus},
        "volumeMounts": [{"name": "checkpoints", "mountPath": spec.mount, "readOnly": True},
                         {"name": "shm", "mountPath": "/dev/shm"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10},
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 60},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.claim, "readOnly": True}},
                        # tensor parallel workers share memory through /dev/shm
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }
    return {"deployment": deployment, "service": service}


def checkpoint_path(partition_key: str, mount: str = "/models") -> str:
    """Where the pod sees a `checkpoints` partition's export: the volume holds the storage's `checkpoints/`."""
    from lm_assets.storage.layout import parse_checkpoint_key

    run, tag = parse_checkpoint_key(partition_key)
    return f"{mount.rstrip('/')}/{run}/{tag}/hf"


def manifests_yaml(spec: VllmSpec) -> str:
    import yaml

    objects = json.loads(json.dumps(vllm_manifests(spec)))  # no shared objects: YAML without anchors
    return "---\n".join(yaml.safe_dump(objects[kind], sort_keys=False) for kind in ("deployment", "service"))


__all__ = ["PORT", "VllmSpec", "checkpoint_path", "manifests_yaml", "vllm_args", "vllm_manifests"]
