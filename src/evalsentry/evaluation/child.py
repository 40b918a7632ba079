"""The evaluation's child process: it loads checkpoints and runs their models, never the parent.

The parent (``evalsentry.evaluation.isolation``) starts it with ``serve``, hands it one job at a
time over a pipe, and kills it on a timeout; the child forwards its log records, reports each
phase (started, loaded, done), leaves when its parent does, and exits when idle.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import logging
import os
import pickle  # nosec B403 - jobs from the process that started this one
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from evalsentry.errors import EvalsentryError
from evalsentry.evaluation.contract import ForwardRaised
from evalsentry.evaluation.isolation import (
    IDLE_GRACE_S,
    IDLE_S,
    LOADING,
    RUNNING,
    failure_reason,
)

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import Evalset


ORPHAN_CHECK_S = 1.0


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _Forward(logging.Handler):
    """Sends each log record to the caller, formatted (as ``QueueHandler`` prepares them)."""

    def __init__(self, send: Callable[[object], None]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            prepared = copy.copy(record)
            prepared.message = prepared.msg = message
            prepared.args, prepared.exc_info, prepared.exc_text = None, None, None
            prepared.stack_info = None
            self._send(("log", prepared))
        except Exception:  # noqa: BLE001 - logging must never break the evaluation
            self.handleError(record)


def _leave_with_parent(parent: int) -> None:
    """Die with the caller: the kernel's parent-death signal on Linux, and a watch elsewhere.

    The watch is a thread, so it cannot run while model code holds the GIL; the Linux signal can.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="evalsentry-orphan-watch", daemon=True).start()


def serve(fd: int, parent: int) -> None:
    """The child's loop: one evaluation per request, until the caller hangs up or forgets it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _leave_with_parent(parent)
    connection = Connection(fd)
    lock = threading.Lock()

    def send(message: object) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with lock:
            connection.send_bytes(data)

    logging.root.addHandler(_Forward(send))
    logging.root.setLevel(logging.WARNING)
    import torch  # noqa: F401 - paid once, before the first evaluation's clock starts

    import evalsentry.checkpoints.checkpoint  # noqa: F401

    send(("ready", os.getpid()))
    evalsets: dict[str, Evalset] = {}
    while connection.poll(IDLE_S + IDLE_GRACE_S):
        try:
            kind, job = pickle.loads(connection.recv_bytes())  # noqa: S301 - from the process that started us
        except EOFError:
            return
        try:
            _serve_one(kind, job, evalsets, send)
        except BrokenPipeError:
            return


def _serve_one(
    kind: str, job: dict[str, Any], evalsets: dict[str, Evalset], send: Callable[[object], None]
) -> None:
    """Run one job: ``evaluate`` a checkpoint, ``time`` it, ``profile`` it, or ``predict``."""
    import torch

    from evalsentry.checkpoints.checkpoint import load_checkpoint

    sys.path[:] = job["sys_path"]
    with contextlib.suppress(OSError):
        os.chdir(job["cwd"])
    if job["threads"]:
        torch.set_num_threads(job["threads"])
    logging.getLogger("evalsentry").setLevel(job["log_level"])
    for key in set(evalsets) - set(job["keep"]):
        del evalsets[key]
    if job["evalset"] is not None:
        evalsets[job["key"]] = job["evalset"]
    evalset = evalsets[job["key"]]
    send(("started",))
    phase = LOADING
    try:
        loaded = load_checkpoint(job["uri"], **job["load"])
        send(("loaded", loaded.lineage, loaded.sha256))
        phase = RUNNING
        result = _run(kind, job, loaded.model, evalset, send)
    except BrokenPipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure goes back as one line, with its traceback
        unexpected = not isinstance(exc, EvalsentryError) or isinstance(exc, ForwardRaised)
        send(("failed", failure_reason(exc, phase), traceback.format_exc() if unexpected else ""))
        return
    send(("done", result))


def _run(
    kind: str, job: dict[str, Any], model: Any, evalset: Evalset, send: Callable[[object], None]
) -> Any:
    """The job's result: paired timing, a serving profile, live predictions or an evaluation."""
    from evalsentry.checkpoints.checkpoint import load_checkpoint
    from evalsentry.evalsets.inputs import shared_tensor
    from evalsentry.evaluation.inference import predict_classes, run_inference
    from evalsentry.evaluation.profile import profile_batches
    from evalsentry.evaluation.speed import time_pair

    device = job["device"]
    if kind == "time":
        reference = load_checkpoint(job["reference_uri"], **job["reference_load"])
        return time_pair(reference.model, model, evalset, device=device, budget_s=job["budget_s"])
    if kind == "profile":
        sizes, budget = job["batch_sizes"], job["budget_s"]
        return profile_batches(model, evalset, device=device, batch_sizes=sizes, budget_s=budget)
    if kind == "predict":
        return predict_classes(model, shared_tensor(job["inputs"]), device=device)
    return run_inference(
        model, evalset, device=device, progress=lambda done, total: send(("progress", done, total))
    )
