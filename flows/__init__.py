"""Prefect flows: wiring only. Deployed by file path from prefect.yaml."""
