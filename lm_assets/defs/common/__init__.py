"""What every domain of the code location shares: config helpers, the environment, partitions, resources,
reporting, the stage contract, the catalog and the job helper."""
