"""Prefect flows: wiring only. Deployed by file path from prefect.yaml.

Imported, the package gives a temporary Prefect server what ``evalsentry run`` gives it (no
telemetry, time to start; :func:`~evalsentry.evaluation.orchestration.local_server_defaults`),
so a flow called from Python runs as the command line runs it.
"""

from evalsentry.evaluation.orchestration import local_server_defaults

local_server_defaults()
