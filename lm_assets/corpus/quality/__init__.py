"""The quality classifier: labels, training, the shipped model and LM annotation."""
