"""Curation: extraction, language ID, the quality rules and policy, toxicity and PII."""
