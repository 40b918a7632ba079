"""Train a small classifier on tabular data (wine, breast cancer) and freeze their evalsets."""
