"""The Dask task runner of ``weekly_eval(task_runner="dask")``, and the local cluster it starts.

Three things the stock ``LocalCluster`` gets wrong for this flow, each measured here:

- Its workers do not know this run's Prefect API. Without ``PREFECT_API_URL`` (a run on
  Prefect's temporary server), each worker starts a temporary server of its own, records its
  task runs there (invisible in the run's UI) and spends CPU on it; ``local_cluster`` hands
  the workers the API this process uses.
- Dask's nanny exports ``MALLOC_TRIM_THRESHOLD_=65536`` to its workers (and into this
  process's environment, which later workers inherit). Any explicit trim threshold turns off
  glibc's dynamic mmap threshold, so every batch's activations become a fresh ``mmap`` of
  zeroed pages: CPU inference ran 1.45x slower in such a worker. ``local_cluster`` starts its
  workers with glibc's defaults.
- Each worker's statistical profiler (a stack sample every 10 ms, for the dashboard's Profile
  page) cost inference 4-8% here; ``local_cluster`` turns it off.

A cluster of your own (``dask_address``) needs the same: ``PREFECT_API_URL`` set on its
workers, and ``flows/dask-worker.yaml`` in their Dask configuration.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from evalsentry.errors import UsageError

PRE_SPAWN = "distributed.nanny.pre-spawn-environ"
TRIM_ENV = "MALLOC_TRIM_THRESHOLD_"
#: What ``flows/dask-worker.yaml`` sets for the workers of a cluster of your own.
WORKER_CONFIG = {f"{PRE_SPAWN}.{TRIM_ENV}": None, "distributed.worker.profile.enabled": False}


@contextlib.contextmanager
def worker_environment(api_url: str) -> Iterator[None]:
    """Dask workers started within this block report to ``api_url``, unprofiled, glibc-default.

    This process's environment is left as it was (the nanny edits it before each spawn).
    """
    import dask

    saved = dict(os.environ)
    os.environ.pop(TRIM_ENV, None)
    try:
        with dask.config.set({**WORKER_CONFIG, f"{PRE_SPAWN}.PREFECT_API_URL": api_url}):
            yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update({k: v for k, v in saved.items() if os.environ.get(k) != v})


def current_api_url() -> str:
    """The Prefect API this process talks to (its temporary server's when none is configured)."""
    from prefect.client.orchestration import get_client

    return str(get_client(sync_client=True).api_url).rstrip("/")


def local_cluster(n_workers: int = 2, **kwargs: Any) -> Any:
    """A local cluster of single-threaded worker processes that report to this process's API."""
    from distributed import LocalCluster

    with worker_environment(current_api_url()):
        return LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=n_workers, threads_per_worker=1, processes=True, **kwargs
        )


def dask_runner(address: str | None) -> Any:
    """A Dask task runner on ``address``, or on a ``local_cluster`` of two workers."""
    try:
        from prefect_dask.task_runners import DaskTaskRunner
    except ImportError:
        raise UsageError(
            "task_runner='dask' needs prefect-dask: pip install 'evalsentry[dask]'"
        ) from None
    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_class=local_cluster)
