"""Quality: the labels people or a model give pages, and the quality classifier trained on them."""
