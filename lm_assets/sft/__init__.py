"""Supervised fine-tuning data: instruction examples validated, templated, tokenized with loss masks, packed."""
