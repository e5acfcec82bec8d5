"""Training: the DeepSpeed program launched through Dagster Pipes, locally or as a Kubernetes
PyTorchJob, and the checkpoints it saves."""
