"""What people read, in plain Python, no Dagster: the model card written from the metadata the assets recorded,
and the pieces of the assets' pages (markdown tables, histograms, the evaluation pages' tables and charts)."""
