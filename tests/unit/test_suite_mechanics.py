"""The suite's own machinery under `pytest -n`: units of work, run order, things built once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import built_once as built_once_module
from tests.built_once import DONE, built_once
from tests.conftest import SHARED_SERVER, SHARED_SERVER_UNIT, _unit_of_work
from tests.conftest import pytest_collection_modifyitems as order_items


def _item(nodeid: str, *fixtures: str) -> pytest.Item:
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))  # type: ignore[return-value]


class TestUnitsOfWork:
    def test_the_shared_servers_tests_are_one_unit_and_other_modules_their_own(self) -> None:
        """Every SHARED_SERVER module maps to one unit; any other test to its module."""
        assert {_unit_of_work(f"{module}::test_x") for module in SHARED_SERVER} == {
            SHARED_SERVER_UNIT
        }
        assert _unit_of_work("tests/integration/test_kill.py::test_a[x]") == (
            "tests/integration/test_kill.py"
        )
        assert _unit_of_work("tests/unit/gate/test_margin.py::TestA::test_b") == (
            "tests/unit/gate/test_margin.py"
        )

    def test_services_first_then_the_rest_in_the_shuffled_order(self) -> None:
        """Shared server, other integration modules, the flows', then the rest, each in its order."""
        shared = sorted(SHARED_SERVER)[0]
        items = [
            _item("tests/unit/b.py::t"),
            _item("tests/flows/b.py::t"),
            _item("tests/integration/test_kill.py::t"),
            _item("tests/flows/a.py::t"),
            _item(f"{shared}::t", "server"),
            _item("tests/unit/a.py::t"),
        ]
        order_items(items)
        assert [i.nodeid.split("::")[0] for i in items] == [
            shared,
            "tests/integration/test_kill.py",
            "tests/flows/b.py",
            "tests/flows/a.py",
            "tests/unit/b.py",
            "tests/unit/a.py",
        ]

    def test_a_test_elsewhere_asking_for_the_shared_server_is_refused(self) -> None:
        """It would start a second run on the one server from another worker: refused by name."""
        with pytest.raises(pytest.UsageError, match=r"tests/flows/x\.py::t uses the shared"):
            order_items([_item("tests/flows/x.py::t", "server")])


class TestBuiltOnce:
    @pytest.fixture
    def factory(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.TempPathFactory:
        """A temp-path factory rooted in this test's folder, as a worker's would be."""
        monkeypatch.setattr(built_once_module, "shared_root", lambda _: tmp_path)
        return SimpleNamespace()  # type: ignore[return-value]

    def test_builds_once_and_every_caller_reads_the_same_folder(
        self, factory: pytest.TempPathFactory
    ) -> None:
        """The second caller gets the first build's folder, and the build does not run again."""
        builds: list[Path] = []

        def build(folder: Path) -> None:
            builds.append(folder)
            (folder / "made").write_text("once")

        first = built_once(factory, "thing", build)
        assert built_once(factory, "thing", build) == first
        assert builds == [first] and (first / "made").read_text() == "once"
        assert (first / DONE).exists()

    def test_a_build_that_raised_is_redone_from_an_empty_folder(
        self, factory: pytest.TempPathFactory
    ) -> None:
        """No mark after a failure: the next caller builds again, without the half-made files."""

        def broken(folder: Path) -> None:
            (folder / "half").write_text("x")
            raise RuntimeError("build failed")

        with pytest.raises(RuntimeError, match="build failed"):
            built_once(factory, "thing", broken)
        folder = built_once(factory, "thing", lambda f: (f / "whole").write_text("y"))
        assert sorted(p.name for p in folder.iterdir()) == [DONE, "whole"]
