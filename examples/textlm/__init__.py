"""A small language model over Python's own documentation: its model, data, training and evalsets."""
