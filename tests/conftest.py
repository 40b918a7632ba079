"""Shared fixtures: isolated environments and tiny real checkpoints."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The margin test's critical values are computed, never read from a cache a test did not make:
# a test of the computation must compute (tests/unit/gate/test_critical_cache.py turns it on).
os.environ["EVALSENTRY_CACHE_DIR"] = ""
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    # Under `pytest -n`, each worker (and every process it starts: flow runs, evaluation
    # children) gets its share of the cores for torch's and BLAS's thread pools: a pool sized for
    # the whole machine in every worker spins on cores the other workers need. Set before any
    # test module imports torch or numpy.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))

FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"
#: Set by a GitHub Actions runner: with them the CI commands write the job's summary and comment.
GITHUB_VARIABLES = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "RUNNER_TEMP")


#: The modules whose tests use the one shared Prefect server (the ``server`` fixture of
#: tests/integration/conftest.py): one unit of work under `pytest -n`, so one server and one
#: worker at a time. Collection refuses a test of another module that asks for that server.
SHARED_SERVER = frozenset(
    f"tests/integration/test_{name}.py"
    for name in ("alerts", "fan_out", "schedule", "server_worker", "ui")
)
SHARED_SERVER_UNIT = "tests/integration (the shared Prefect server)"


def _unit_of_work(nodeid: str) -> str:
    """What `pytest -n` keeps on one worker: the shared server's tests, else the test's module."""
    module = nodeid.split("::", maxsplit=1)[0]
    return SHARED_SERVER_UNIT if module in SHARED_SERVER else module


#: Where the long units of work are (real services, weekly flow runs), in the order they start.
LONG_UNITS = ("tests/integration/", "tests/flows/")


def _run_order(item: pytest.Item) -> int:
    """The shared server's tests, the other integration tests, the flows' tests, then the rest.

    Longest units first, roughly: a module of weekly flow runs takes a minute or two, a unit
    test module seconds. Started last, a long unit would keep one worker busy while the
    others stand idle; the many short ones fill in at the end.
    """
    module = item.nodeid.split("::", maxsplit=1)[0]
    if module in SHARED_SERVER:
        return 0
    return 1 + next(
        (i for i, at in enumerate(LONG_UNITS) if module.startswith(at)), len(LONG_UNITS)
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-service tests first, then the flows'; pytest-randomly's shuffle is kept otherwise.

    Under `pytest -n` (see pytest_xdist_make_scheduler) the shared server's tests, the longest
    unit, start at once on one worker while the tests that start servers of their own start on
    the others, then the flows' modules, and the unit tests fill in around them.
    """
    for item in items:
        if "server" in getattr(item, "fixturenames", ()) and _run_order(item) != 0:
            raise pytest.UsageError(
                f"{item.nodeid} uses the shared Prefect server: add its module to SHARED_SERVER "
                "in tests/conftest.py"
            )
    items.sort(key=_run_order)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`pytest -n`'s default distribution, by unit of work: a module, or the shared server's tests.

    A module-scoped fixture (a week of trained models, a moto server) is then built once, and
    the tests of the shared Prefect server run one after another on one worker, one server for
    the run. Units go out in collection order. An explicit ``--dist`` other than ``load`` is
    left to xdist.
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid)

    config.option.loadscopereorder = False  # keep the collection order: services first
    return ByUnitOfWork(config, log)


@pytest.fixture(scope="session")
def prefect_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prefect database migrated once per test run; copy it (``tests.prefect_database.seed``)."""
    from tests.prefect_database import migrated_database

    return migrated_database(tmp_path_factory)


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs as outside GitHub Actions, even where the suite runs inside it.

    Else `evalsentry gate` in a test would append to the real job's summary; the tests of the
    GitHub outputs set these variables themselves.
    """
    for name in GITHUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def prefect_console_on_the_run_s_stderr() -> None:
    """Prefect's console log handler writes to the stream it was built with.

    Built while a test captured its output (``capsys``), that stream is closed when the test
    ends, and the next flow run in the process (another test) fails writing its first log
    line. Each test starts with the handler on the stderr of the test run itself.
    """
    import logging
    import sys

    if "prefect.logging.handlers" not in sys.modules:
        return  # Prefect not loaded: nothing to point anywhere (and not worth importing)
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger(), *map(logging.getLogger, logging.root.manager.loggerDict)]
    for handler in {h for logger in loggers for h in logger.handlers}:
        if isinstance(handler, PrefectConsoleHandler):
            handler.stream = handler.console.file = sys.stderr  # setStream flushes the old one


@pytest.fixture
def pinned_git(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin the code commit through the environment, as a CI build would."""
    monkeypatch.setenv("EVALSENTRY_GIT_SHA", FAKE_SHA)
    monkeypatch.delenv("EVALSENTRY_GIT_DIRTY", raising=False)
    return FAKE_SHA


@pytest.fixture
def train_data(tmp_path: Path) -> Path:
    """A small training-data file to hash into lineage."""
    path = tmp_path / "train.csv"
    path.write_text("x,y\n1,0\n2,1\n")
    return path


@pytest.fixture
def tiny_checkpoint(tmp_path: Path, pinned_git: str, train_data: Path) -> Path:
    """A real checkpoint of a tiny model, saved through save_checkpoint."""
    import torch

    from evalsentry.checkpoints.checkpoint import save_checkpoint
    from tests.models import TinyNet

    torch.manual_seed(0)
    return save_checkpoint(
        TinyNet(),
        tmp_path / "ckpt" / "tiny.pt",
        metrics={"val_accuracy": 0.5},
        config={"lr": 0.1, "layers": [4, 8, 3]},
        seed=0,
        data=train_data,
        factory_kwargs={"features": 4, "classes": 3},
    )


@pytest.fixture
def trusted_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project trusting the test models (all else default), as the working folder."""
    from tests.models import TRUSTED_YAML

    (tmp_path / "evalsentry.yaml").write_text(TRUSTED_YAML)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def chdir_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run the test in its own folder, so nothing lands in the working directory."""
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def make_read_only(folder: Path) -> Callable[[], None]:
    """Make ``folder`` refuse new files even for root; return what undoes it.

    Not root: mode 0555. Root writes through modes, so there the folder is made immutable
    (``chattr +i``, e2fsprogs); where neither works the test is skipped, saying why.
    """
    import shutil
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return lambda: folder.chmod(0o755)
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], check=False).returncode:
        pytest.skip("root writes through modes, and chattr +i is not available to stop it")
    return lambda: subprocess.run([chattr, "-i", str(folder)], check=True)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody, root included, can create a file in (undone after the test)."""
    folder = tmp_path / "read-only"
    undo = make_read_only(folder)
    yield folder
    undo()


TOY_ROWS = 300


def _teacher() -> object:
    import torch

    from tests.models import TinyNet

    torch.manual_seed(7)
    return TinyNet(features=4, classes=3, hidden=8)


@pytest.fixture
def toy_evalset(tmp_path: Path) -> Path:
    """A frozen classification evalset whose labels a known 'teacher' network gets all right."""
    import numpy as np
    import pyarrow as pa
    import torch

    from evalsentry.evalsets.evalset import InputsSpec
    from evalsentry.evalsets.freeze import freeze_evalset

    rng = np.random.default_rng(3)
    features = rng.normal(size=(TOY_ROWS, 4)).astype(np.float32)
    with torch.no_grad():
        labels = _teacher()(torch.from_numpy(features)).argmax(1).numpy()  # type: ignore[operator]
    table = pa.table(
        {
            "x": pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), 4),
            "label": labels.astype(np.int64),
            "half": np.where(np.arange(TOY_ROWS) % 2 == 0, "even", "odd"),
        }
    )
    folder = tmp_path / "evalsets" / "toy"
    freeze_evalset(
        table,
        folder,
        name="toy",
        task="classification",
        target="label",
        inputs=InputsSpec(column="x", shape=[4]),
        slices=["half"],
        classes=[0, 1, 2],
    )
    return folder


@pytest.fixture
def toy_checkpoints(tmp_path: Path, pinned_git: str, train_data: Path) -> dict[str, Path]:
    """Checkpoints for the toy evalset: 'good' (the teacher) and 'degraded' (a biased copy)."""
    import torch

    from evalsentry.checkpoints.checkpoint import save_checkpoint

    good = _teacher()
    degraded = _teacher()
    with torch.no_grad():
        degraded.body[2].bias[0] += 2.0  # type: ignore[attr-defined,index]
    paths = {}
    for name, model in (("good", good), ("degraded", degraded)):
        paths[name] = save_checkpoint(
            model,  # type: ignore[arg-type]
            tmp_path / "checkpoints" / f"{name}.pt",
            metrics={},
            config={"variant": name},
            seed=7,
            data=train_data,
            factory="tests.models:TinyNet",
            factory_kwargs={"features": 4, "classes": 3, "hidden": 8},
        )
    return paths
