"""Each evaluation's model runs in a child process that a timeout can kill.

Why a process, and not a thread or a Prefect task timeout: Python cannot stop a thread, and a
``forward`` stuck in C code (a CUDA call, a deadlocked OpenMP region, a regular expression
holding the GIL) never comes back to let it; Prefect's ``timeout_seconds`` on a task in a thread
only marks the run TimedOut and leaves the thread running, holding the week. A process can
always be killed, and what the model allocated (its CUDA context too) goes with it. The same
boundary makes a crash (a segfault in an extension, ``os._exit`` in model code) one pair's error.

What runs in the child is the code that comes with a checkpoint: reading it, calling its
factory, loading the weights, and the inference loop (``inference.run_inference``). Metrics, the
gate and the history stay in the caller. The child is handed the allowlist
(``trusted_factories``, ``max_checkpoint_bytes``) and the factory pinned at registration, and
``load_checkpoint`` checks both there before anything is inflated or imported.

How the child is started, and why so:

- ``subprocess`` (``python -c``), not ``multiprocessing``: a Dask worker is a daemonic
  multiprocessing process, and multiprocessing refuses those children; its spawn and forkserver
  methods re-import the caller's ``__main__`` in each child (``prefect.engine`` in a deployment,
  seconds more). ``fork`` is out: forking after torch started its thread pools, or after CUDA
  was initialised, is unsafe (a CUDA context does not survive a fork).
- One child serves evaluation after evaluation, so torch's import (2-3 s) is paid once per
  process, not per evaluation, and the child keeps the evalsets it was sent and, on CUDA, their
  device-resident copies. A timeout, a crash or a failed evaluation retires the child (a failed
  CUDA model can leave its context unusable); the next evaluation starts a fresh one.
- The evalset goes to the child pickled, once per child and evalset (a copy per child): the
  bytes the caller verified are the bytes the model sees, without reading the files again.
- The clock starts once the child holds the evalset: starting a child and handing it the data
  are not the model's time (they have their own, generous, limit).
- The child's log records are re-emitted here under their own logger names; its stdout and
  stderr are this process's. It ignores SIGINT (the caller handles Ctrl-C and kills it), exits
  when the caller's end of the pipe closes, when it finds itself orphaned, and, on Linux, is
  killed by the kernel when the caller dies.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import pickle  # nosec B403 - messages between this process and the child it started
import queue
import signal
import socket
import subprocess  # nosec B404 - starts this same interpreter, without a shell
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalsentry.errors import EvalsentryError, UsageError, exception_line
from evalsentry.trust import import_path

if TYPE_CHECKING:
    from evalsentry.evalsets.evalset import Evalset
    from evalsentry.evaluation.inference import ProgressFn
    from evalsentry.trust import Trust

log = logging.getLogger(__name__)

#: Seconds to start a child and hand it the evalset: not the model's time, and never near it.
START_TIMEOUT_S = 300.0
#: An idle child this old is retired by the caller; the child itself leaves a minute later.
IDLE_S, IDLE_GRACE_S = 600.0, 60.0
EVALSETS_KEPT = 4  # evalsets a child keeps between evaluations
KILL_WAIT_S = 10.0  # for a killed child to be reaped (a process in uninterruptible I/O lingers)

STARTING = "starting the evaluation process"
LOADING = "loading the checkpoint"
RUNNING = "running the model"


class EvaluationFailed(UsageError):
    """An isolated evaluation failed; ``lineage`` and ``sha256`` when the checkpoint had loaded."""

    def __init__(
        self, reason: str, lineage: dict[str, Any] | None = None, sha256: str | None = None
    ) -> None:
        self.reason, self.lineage, self.sha256 = reason, lineage, sha256
        super().__init__(reason)


class EvaluationTimedOut(EvaluationFailed):
    """The evaluation ran past its time; its process was killed."""

    def __init__(
        self, seconds: float, phase: str, lineage: dict[str, Any] | None, sha256: str | None
    ) -> None:
        self.seconds, self.phase = seconds, phase
        super().__init__(
            f"timed out after {seconds:g} s {phase}; its process was killed "
            "(inference_timeout_s in evalsentry.yaml)",
            lineage,
            sha256,
        )


class EvaluationProcessDied(EvaluationFailed):
    """The child process ended without an answer: a crash, a kill, or model code exiting."""

    def __init__(
        self, returncode: int | None, phase: str, lineage: dict[str, Any] | None, sha256: str | None
    ) -> None:
        self.returncode = returncode
        if returncode is not None and returncode < 0:
            how = f"killed by signal {_signal_name(-returncode)}"
        else:
            how = f"exit code {returncode}"
        super().__init__(f"the evaluation process died ({how}) while {phase}", lineage, sha256)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def failure_reason(error: BaseException, phase: str) -> str:
    """One readable line: an evalsentry error's message, else what raised what while doing what."""
    if isinstance(error, EvalsentryError):
        return " ".join(str(error).split())
    return f"{phase} raised {exception_line(error)}"


@dataclass(frozen=True)
class Isolated:
    """What the child sends back: the checkpoint's lineage and hash, and its result.

    The result is an ``InferenceResult``, or a ``PairedTiming`` for a timing request.
    """

    lineage: dict[str, Any]
    sha256: str
    result: Any


def evaluate_isolated(
    uri: str,
    evalset: Evalset,
    *,
    expected_sha256: str | None,
    trust: Trust,
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    transform: str | None = None,
    device: str,
    timeout_s: float,
    progress: ProgressFn | None = None,
) -> Isolated:
    """Load the checkpoint at ``uri`` and run it over ``evalset`` in a child process.

    Args:
        uri: the checkpoint file.
        evalset: a loaded, verified evalset (sent to the child once per child).
        expected_sha256: the hash pinned at registration, checked in the child.
        trust: the trusted factories and the size limit, checked in the child.
        factory: the factory pinned at registration (``None``: the file's own, if trusted).
        factory_kwargs, transform: the kwargs and serving transform pinned with it.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        timeout_s: seconds from the child holding the evalset to its answer.
        progress: called here with (examples done, total) as the child reports them.

    Raises:
        EvaluationTimedOut: ``timeout_s`` passed; the child was killed.
        EvaluationProcessDied: the child ended without an answer.
        EvaluationFailed: the evaluation raised in the child, with its one-line reason.
    """
    load = load_arguments(trust, expected_sha256, factory, factory_kwargs, transform)
    return _request(_Request("evaluate", uri, evalset, load, device, timeout_s, progress))


def load_arguments(
    trust: Trust,
    expected_sha256: str | None,
    factory: str | None = None,
    factory_kwargs: Mapping[str, Any] | None = None,
    transform: str | None = None,
) -> dict[str, Any]:
    """``load_checkpoint``'s keyword arguments in the child: what is trusted and pinned."""
    return {
        "trust": trust,
        "expected_sha256": expected_sha256,
        "factory": factory,
        "factory_kwargs": dict(factory_kwargs) if factory_kwargs is not None else None,
        "transform": transform,
    }


def request_isolated(
    kind: str,
    uri: str,
    load: dict[str, Any],
    evalset: Evalset,
    *,
    device: str,
    timeout_s: float,
    **extra: Any,
) -> Isolated:
    """One job of ``kind`` on ``uri``'s checkpoint in a child: ``time`` it, or ``profile`` it.

    ``time``: against ``reference_uri`` (``reference_load``) within ``budget_s``, the result a
    :class:`~evalsentry.evaluation.speed.PairedTiming`; ``profile``: ``batch_sizes`` within
    ``budget_s``, a :class:`~evalsentry.evaluation.profile.ServingProfile`. Loaded as
    :func:`evaluate_isolated` loads one (``load_arguments``); raises as it does.
    """
    return _request(_Request(kind, uri, evalset, load, device, timeout_s, None, extra))


def predict_isolated(
    uri: str,
    load: dict[str, Any],
    evalset: Evalset,
    inputs: Any,
    *,
    device: str,
    timeout_s: float,
) -> Isolated:
    """Predict the class of each row of ``inputs`` (a live sample) with the checkpoint at ``uri``.

    In a child process under ``timeout_s``, as every forward of a checkpoint runs: a model that
    hangs or crashes on live data fails its own drift check, never the week. The answer's
    result is the predicted classes (a numpy array). Raises as :func:`evaluate_isolated` does.
    """
    return _request(
        _Request("predict", uri, evalset, load, device, timeout_s, None, {"inputs": inputs})
    )


@dataclass(frozen=True)
class _Request:
    """One job for a child: what to load and run, where, and how long it may take."""

    kind: str  # evaluate | time | profile | predict
    uri: str
    evalset: Evalset
    load: dict[str, Any]  # load_checkpoint's keyword arguments (load_arguments)
    device: str
    timeout_s: float
    progress: ProgressFn | None
    extra: Mapping[str, Any] = field(default_factory=dict)  # the kind's own arguments


def _request(request: _Request) -> Isolated:
    child = _checkout()
    done = False
    try:
        answer = child.request(request)
        done = True
        return answer
    finally:
        if done:
            _checkin(child)
        else:  # failed, timed out, died, or interrupted here: never reuse it
            child.close()


# --- the caller's side ------------------------------------------------------------------------


class _Child:
    """A child process and the connection to it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[1])  # the folder holding this package
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            f"from evalsentry.evaluation.child import serve; serve({theirs.fileno()}, {os.getpid()})"
        )
        # -P: the working folder is not put on sys.path, -E: nor PYTHONPATH, so the child's own
        # imports (queue, socket, torch) come from the interpreter's paths only; each job then
        # sets the caller's import path (standard library first).
        argv = [sys.executable, "-E", "-P", "-c", code]
        try:
            self.process = _SPAWNER.popen(argv, theirs.fileno())
        finally:
            theirs.close()
        self.connection = Connection(ours.detach())
        self.ready = False
        self.evalsets: OrderedDict[str, None] = OrderedDict()
        self.idle_since = time.monotonic()
        with _LOCK:
            _LIVE.add(self)

    def send(self, message: object) -> None:
        self.connection.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def receive(self, timeout: float) -> tuple[Any, ...] | None:
        """The next message, or None when ``timeout`` passes first; EOFError when the child is gone."""
        if not self.connection.poll(max(timeout, 0.0)):
            return None
        message: tuple[Any, ...] = pickle.loads(self.connection.recv_bytes())  # noqa: S301 - our own child's messages
        return message

    def usable(self) -> bool:
        return self.process.poll() is None and time.monotonic() - self.idle_since < IDLE_S

    def close(self) -> None:
        """Kill the child (if it still runs) and reap it."""
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(KILL_WAIT_S)
        self.connection.close()
        with _LOCK:
            _LIVE.discard(self)

    def returncode(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.process.wait(KILL_WAIT_S)
        return None

    def request(self, request: _Request) -> Isolated:
        phase, lineage, sha256 = STARTING, None, None
        deadline = time.monotonic() + START_TIMEOUT_S
        timeout_s = request.timeout_s
        try:
            if not self.ready:
                self._expect_ready(deadline)
            self.send((request.kind, {**self._job(request), **request.extra}))
            while True:
                message = self.receive(deadline - time.monotonic())
                if message is None:
                    if phase == STARTING:
                        raise EvaluationFailed(
                            f"could not start the evaluation process within {START_TIMEOUT_S:g} s"
                        )
                    raise EvaluationTimedOut(timeout_s, phase, lineage, sha256)
                kind = message[0]
                if kind == "started":
                    phase, deadline = LOADING, time.monotonic() + timeout_s
                elif kind == "loaded":
                    phase, lineage, sha256 = RUNNING, message[1], message[2]
                elif kind == "progress":
                    _report(request.progress, message[1], message[2])
                elif kind == "log":
                    _reemit(message[1])
                elif kind == "failed":
                    if message[2]:
                        log.warning("%s: %s\n%s", request.uri, message[1], message[2])
                    raise EvaluationFailed(message[1], lineage, sha256)
                elif kind == "done":
                    return Isolated(lineage or {}, sha256 or "", message[1])
        except (EOFError, OSError):
            raise EvaluationProcessDied(self.returncode(), phase, lineage, sha256) from None

    def _expect_ready(self, deadline: float) -> None:
        while not self.ready:
            message = self.receive(deadline - time.monotonic())
            if message is None:
                raise EvaluationFailed(
                    f"could not start the evaluation process within {START_TIMEOUT_S:g} s"
                )
            if message[0] == "log":
                _reemit(message[1])
            self.ready = message[0] == "ready"

    def _job(self, request: _Request) -> dict[str, Any]:
        # The manifest as a whole, not only the identity hash: a changed class order changes
        # the targets without changing the identity.
        evalset = request.evalset
        key = evalset.sha256 + hashlib.sha256(evalset.spec.model_dump_json().encode()).hexdigest()
        fresh = key not in self.evalsets
        self.evalsets[key] = None
        self.evalsets.move_to_end(key)
        while len(self.evalsets) > EVALSETS_KEPT:
            self.evalsets.popitem(last=False)
        torch = sys.modules.get("torch")
        return {
            "uri": request.uri,
            "load": request.load,  # load_checkpoint's keyword arguments: what is trusted and pinned
            "device": request.device,
            "key": key,
            "evalset": evalset if fresh else None,
            "keep": list(self.evalsets),
            "sys_path": import_path(sys.path),
            "cwd": str(Path.cwd()),
            "threads": torch.get_num_threads() if torch is not None else None,
            "log_level": logging.getLogger("evalsentry").getEffectiveLevel(),
        }


def _report(progress: ProgressFn | None, done: int, total: int) -> None:
    """Pass progress on; a failing progress sink (an API hiccup) is not the model's failure."""
    if progress is None:
        return
    try:
        progress(done, total)
    except Exception as exc:  # noqa: BLE001 - progress is a courtesy; the evaluation goes on
        log.warning("progress report failed (%s); the evaluation goes on", exception_line(exc))


def _reemit(record: logging.LogRecord) -> None:
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


class _Spawner:
    """Starts every child from one daemon thread that lives as long as this process.

    On Linux a child asks the kernel to kill it when the thread that started it ends; started
    from a short-lived thread (a task runner's), it would die with that thread, mid-evaluation.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], list[str], int]]
        self._requests = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, argv: list[str], fd: int) -> subprocess.Popen[bytes]:
        """``argv`` started with ``fd`` open in it and no stdin, from the spawner thread."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="evalsentry-spawner", daemon=True
                )
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((future, argv, fd))
        return future.result()

    def _serve(self) -> None:
        while True:
            future, argv, fd = self._requests.get()
            try:
                future.set_result(
                    subprocess.Popen(argv, stdin=subprocess.DEVNULL, pass_fds=(fd,))  # noqa: S603 - this interpreter, our own code
                )
            except BaseException as exc:  # noqa: BLE001 - handed to the caller waiting on it
                future.set_exception(exc)


_LOCK = threading.Lock()
_IDLE: list[_Child] = []
_LIVE: set[_Child] = set()
_SPAWNER = _Spawner()


def _checkout() -> _Child:
    """The most recently used idle child that is alive and not too old, else a new one."""
    found, stale = None, []
    with _LOCK:
        while _IDLE and found is None:
            child = _IDLE.pop()
            if child.usable():
                found = child
            else:
                stale.append(child)
    for child in stale:
        child.close()
    return found or _Child()


def prestart() -> None:
    """Have a child ready: start one now, to import torch while the caller does other work.

    The next evaluation takes it like any idle child. Where one is idle already, nothing starts.
    """
    with _LOCK:
        if any(child.usable() for child in _IDLE):
            return
    _checkin(_Child())


def _checkin(child: _Child) -> None:
    child.idle_since = time.monotonic()
    with _LOCK:
        _IDLE.append(child)


def idle_pids() -> list[int]:
    """Process ids of the idle children kept for the next evaluations."""
    with _LOCK:
        return [child.process.pid for child in _IDLE]


@atexit.register
def shutdown() -> None:
    """Kill every child this process started (idle ones, and any still running)."""
    with _LOCK:
        children = list(_LIVE)
        _IDLE.clear()  # killed below: none is kept for the next evaluation
    for child in children:
        child.close()


# --- the child's side -------------------------------------------------------------------------
