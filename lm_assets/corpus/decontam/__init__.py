"""Decontamination against evaluation sets."""
