"""The installed environment is exactly the committed lock: what CI tests is what a machine gets."""

from __future__ import annotations

import re
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = Path(__file__).parents[2] / "requirements" / "lock.txt"
NOT_LOCKED = {"evalsentry", "pip", "setuptools", "wheel"}  # the project itself and the installers


def _pins() -> dict[str, Version]:
    """The lock's pins that apply to this interpreter and platform."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.+))?$", line)
        if match and (match[3] is None or Marker(match[3]).evaluate()):
            pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def test_every_installed_distribution_is_pinned_at_its_locked_version() -> None:
    """No installed package is missing from the lock or at another version (a local build tag aside)."""
    pins = _pins()
    # The environment's own folders, not sys.path: importing torch._inductor puts setuptools'
    # vendored packages on sys.path, and they were never installed.
    folders = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {
        canonicalize_name(d.metadata["Name"]): Version(d.version)
        for d in metadata.distributions(path=folders)
    }
    unpinned = sorted(set(installed) - set(pins) - NOT_LOCKED)
    assert not unpinned, f"installed but not in {LOCK.name} (run `make lock`): {unpinned}"
    drifted = {
        name: (str(version), str(pins[name]))
        for name, version in installed.items()
        if name in pins and Version(version.public) != pins[name]
    }
    assert not drifted, f"installed vs locked: {drifted}"


def test_the_lock_avoids_the_prefect_release_whose_scheduler_never_fires() -> None:
    """Prefect 3.9.0 with SQLAlchemy 2.1 never creates scheduled runs; the lock holds neither that pair nor an older Prefect."""
    pins = _pins()
    assert pins["prefect"] >= Version("3.9.1")
    assert pins["torch"] == Version("2.13.0")
