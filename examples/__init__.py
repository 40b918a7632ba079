"""Runnable examples that produce lineage-carrying checkpoints."""
