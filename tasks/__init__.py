"""Thin Prefect tasks: one evalsentry library call each, plus retries, caching, names and tags."""
