"""The standalone training program. It runs under `deepspeed` or `torchrun` and reports to Dagster
only through dagster-pipes, from rank 0."""
