"""Reports written from the metadata the assets recorded: plain Python, no Dagster."""
