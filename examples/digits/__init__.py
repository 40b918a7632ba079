"""The handwritten-digits example: a small CNN and its training script."""
