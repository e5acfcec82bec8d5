"""Audits over the stored corpus: lineage of packed sequences, curation against labels."""
