"""Peak resident memory of each process of a command's tree, by role, read from ``/proc``.

``os.wait4`` gives only the largest single process of a tree. A weekly run has two that matter:
the flow engine (the ``evalsentry`` process itself) and the evaluation child it starts
(``evalsentry.evaluation.child``), and, with Prefect's temporary server, the server. Each
process's ``VmHWM`` (the kernel's own high-water mark of its resident set) is read every
``interval`` seconds while it lives; the last reading before a process ends is its peak, short
by at most what it grew in its final ``interval``. Linux only.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

#: Roles by a word of the command line; the command's own process is the engine.
ROLES = (("evalsentry.evaluation.child", "evaluation_child"), ("prefect", "server"))


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's), or none once it is gone."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(p) for p in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def _peak_and_cmdline(pid: int) -> tuple[float, str] | None:
    """``pid``'s high-water resident set (MiB) and command line, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024, cmdline
    return None


def _role(pid: int, root: int, cmdline: str) -> str | None:
    """``engine``, a role of :data:`ROLES`, or None: a short helper (``file``, cpuinfo's probe, a
    fork between ``fork`` and ``exec`` that still shows the engine's command line)."""
    if pid == root:
        return "engine"
    return next((role for word, role in ROLES if word in cmdline), None)


def tree_peaks(
    command: list[str], cwd: str, env: dict[str, str], interval: float = 0.02
) -> dict[str, float]:
    """Run ``command`` (it must succeed); the peak MiB of the largest process of each role."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    peaks: dict[int, tuple[float, str]] = {}
    while process.poll() is None:
        pending = [process.pid]
        while pending:
            pid = pending.pop()
            found = _peak_and_cmdline(pid)
            if found is not None and found[1]:
                peaks[pid] = found
            pending += _children(pid)
        time.sleep(interval)
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed with {process.returncode}")
    roles: dict[str, float] = {}
    for pid, (peak, cmdline) in peaks.items():
        role = _role(pid, process.pid, cmdline)
        if role is not None:
            roles[role] = max(roles.get(role, 0.0), peak)
    return roles
