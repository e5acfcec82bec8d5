"""Evaluation: perplexity, MMLU and C-Eval per checkpoint, and the sensor that requests them."""
