"""Checkpoints are data: the factory allowlist, bounded reading, pinned models, checked entries."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from evalsentry.checkpoints.checkpoint import build_model, load_checkpoint
from evalsentry.checkpoints.payload import check_archive, read_payload
from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import Config, load_config
from evalsentry.errors import (
    CheckpointCorrupt,
    CheckpointTooLarge,
    ConfigError,
    FactoryError,
    ModelMismatch,
    RegistryEntryInvalid,
    RegistryError,
    StateDictMismatch,
    UntrustedFactory,
)
from evalsentry.evalsets.evalset import load_evalset
from evalsentry.evaluation.pipeline import Target, evaluate_checkpoint
from evalsentry.trust import DEFAULT_MAX_CHECKPOINT_BYTES, Trust
from tests.hostile import (
    BOMB_BYTES,
    SIDE_EFFECT_MODULE,
    assert_nothing_ran,
    bomb,
    save,
    side_effect_path,
    victim,
)
from tests.models import TRUST, TRUSTED_FACTORIES, TRUSTED_YAML, TinyNet, tiny_net

ROOT = Path(__file__).parents[2]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder for hostile files, its side-effect module importable, its marks empty."""
    found = tmp_path / "hostile"
    monkeypatch.syspath_prepend(str(side_effect_path(found)))
    victim(found)
    return found


class TestProjectModules:
    """Trusted modules beside evalsentry.yaml are known by where their code really is."""

    PACKAGE = "evalsentry_linked_models"

    @pytest.fixture
    def shared(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
        """A model package kept outside the project (a folder shared by several repositories)."""
        from tests.unit.test_poisoning import TEAM_MODELS

        package = tmp_path / "shared" / self.PACKAGE
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "model.py").write_text(TEAM_MODELS)
        monkeypatch.setattr(sys, "path", list(sys.path))
        for name in [m for m in sys.modules if m.startswith(self.PACKAGE)]:
            monkeypatch.delitem(sys.modules, name)
        yield package
        for name in [m for m in sys.modules if m.startswith(self.PACKAGE)]:
            del sys.modules[name]

    def test_a_linked_package_builds_every_line(self, shared: Path, tmp_path: Path) -> None:
        """The package linked beside the config: the second model it builds is the same class."""
        project = tmp_path / "project"
        project.mkdir()
        (project / self.PACKAGE).symlink_to(shared, target_is_directory=True)
        trust = Trust((f"{self.PACKAGE}.model",), project=str(project))
        first = trust.resolve(f"{self.PACKAGE}.model:TinyNet")
        assert trust.resolve(f"{self.PACKAGE}.model:TinyNet") is first
        assert Path(sys.modules[self.PACKAGE].__file__ or "").resolve().parent == shared

    def test_a_true_clash_names_both_real_folders(self, shared: Path, tmp_path: Path) -> None:
        """Two projects, each with its own package of that name: the second is refused, naming both."""
        first, second = tmp_path / "first", tmp_path / "second"
        first.mkdir()
        (first / self.PACKAGE).symlink_to(shared, target_is_directory=True)
        shutil.copytree(shared, second / self.PACKAGE)
        Trust((f"{self.PACKAGE}.model",), project=str(first)).resolve(
            f"{self.PACKAGE}.model:TinyNet"
        )
        with pytest.raises(FactoryError) as clash:
            Trust((f"{self.PACKAGE}.model",), project=str(second)).resolve(
                f"{self.PACKAGE}.model:TinyNet"
            )
        message = str(clash.value)
        assert f"({second / self.PACKAGE / '__init__.py'}) cannot be imported" in message
        assert f"already loaded from {shared / '__init__.py'}; rename one of them" in message


class TestAllowlist:
    def test_nothing_is_trusted_by_default(self) -> None:
        """Trust() and a config without trusted_factories refuse every factory."""
        for trust in (Trust(), Config().trust):
            with pytest.raises(UntrustedFactory, match="not trusted, nothing was imported"):
                trust.resolve("tests.models:TinyNet")

    def test_a_module_admits_the_model_classes_defined_in_it(self) -> None:
        """A module entry admits its nn.Module subclasses."""
        assert Trust(["tests.models"]).resolve("tests.models:TinyNet") is TinyNet

    def test_a_module_does_not_admit_its_functions(self) -> None:
        """A function needs its own module:attr entry."""
        with pytest.raises(UntrustedFactory, match=r"add 'tests\.models:tiny_net' itself"):
            Trust(["tests.models"]).resolve("tests.models:tiny_net")
        assert Trust(["tests.models:tiny_net"]).resolve("tests.models:tiny_net") is tiny_net

    def test_a_module_does_not_admit_what_it_imports_from_elsewhere(self) -> None:
        """A class re-exported from another module (here torch's) is not the module's own."""
        with pytest.raises(UntrustedFactory, match=r"is defined in 'torch\.nn\.modules\.linear'"):
            Trust(["tests.models"]).resolve("tests.models:nn.Linear")

    def test_a_module_does_not_admit_its_submodules(self) -> None:
        """Trusting a package trusts no module below it."""
        with pytest.raises(UntrustedFactory, match="not trusted"):
            Trust(["tests"]).resolve("tests.models:TinyNet")

    def test_an_unlisted_module_is_never_imported(self, folder: Path) -> None:
        """A module whose import writes a file is refused by name: not imported, nothing written."""
        with pytest.raises(UntrustedFactory) as refused:
            TRUST.resolve(f"{SIDE_EFFECT_MODULE}:Net")
        assert str(refused.value) == (
            f"model factory '{SIDE_EFFECT_MODULE}:Net': not trusted, nothing was imported; add "
            f"the module '{SIDE_EFFECT_MODULE}' or '{SIDE_EFFECT_MODULE}:Net' to "
            "trusted_factories in evalsentry.yaml"
        )
        assert_nothing_ran(folder)

    def test_a_listed_class_that_is_no_model_is_refused_before_it_is_called(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Listed exactly or not, a class that is not an nn.Module subclass is never called."""
        module = tmp_path / "evalsentry_not_a_model.py"
        mark = tmp_path / "called"
        module.write_text(
            "from pathlib import Path\n\n\nclass Thing:\n"
            f"    def __init__(self):\n        Path({str(mark)!r}).touch()\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        trust = Trust(["evalsentry_not_a_model:Thing"])
        with pytest.raises(FactoryError, match=r"is a class but not a torch\.nn\.Module subclass"):
            build_model("evalsentry_not_a_model:Thing", trust=trust)
        assert not mark.exists()

    @pytest.mark.parametrize("factory", ["os:system", "subprocess:run", "torch.hub:load"])
    def test_the_standard_library_and_torch_stay_refused_even_when_listed(
        self, factory: str
    ) -> None:
        """Defence in depth: the blocklist still refuses what a list names by mistake."""
        with pytest.raises(FactoryError, match="standard library or torch are not allowed"):
            Trust([factory]).resolve(factory)

    @pytest.mark.parametrize("factory", ["tests.models.TinyNet", "a b:c", 5, ":x"])
    def test_a_malformed_factory_is_refused(self, factory: object) -> None:
        """Anything but package.module:callable is refused with the expected form."""
        with pytest.raises(FactoryError, match=r"package\.module:callable"):
            TRUST.check(factory)


class TestConfig:
    def test_trusted_factories_and_the_limit_come_from_the_file(self, tmp_path: Path) -> None:
        """The keys are read, and refusals name the file they came from."""
        file = tmp_path / "custom.yaml"
        file.write_text(TRUSTED_YAML + "max_checkpoint_bytes: 1000\n")
        trust = load_config(file).trust
        assert trust == Trust(TRUSTED_FACTORIES, 1000, str(file.resolve()), str(tmp_path.resolve()))
        assert Config().max_checkpoint_bytes == DEFAULT_MAX_CHECKPOINT_BYTES == 8 * 2**30

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            ("trusted_factories: ['pkg models']", "'pkg models' is neither a module name"),
            ("trusted_factories: pkg.models", "Input should be a valid list"),
            ("max_checkpoint_bytes: 0", "greater than 0"),
        ],
    )
    def test_bad_values_are_one_line_naming_the_field(
        self, tmp_path: Path, text: str, problem: str
    ) -> None:
        """A malformed entry or limit names the file and the field."""
        file = tmp_path / "evalsentry.yaml"
        file.write_text(text + "\n")
        with pytest.raises(ConfigError, match=r"evalsentry\.yaml: (trusted_factories|max_check)"):
            load_config(file)
        with pytest.raises(ConfigError, match=problem):
            load_config(file)

    def test_the_shipped_config_trusts_the_digits_example(self) -> None:
        """evalsentry.yaml at the project root admits the example's model class."""
        from examples.digits.model import DigitsCNN

        trust = load_config(ROOT / "evalsentry.yaml").trust
        assert trust.resolve("examples.digits.model:DigitsCNN") is DigitsCNN


class TestBoundedReading:
    def test_a_compression_bomb_is_refused_before_anything_is_inflated(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The declared sizes are summed from the zip's directory; torch.load is never called."""
        path = bomb(tmp_path)
        assert path.stat().st_size < 64 * 2**10 < BOMB_BYTES

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("inflated")

        monkeypatch.setattr(torch, "load", refuse)
        with pytest.raises(
            CheckpointTooLarge, match="refused unread: its archive inflates to"
        ) as refused:
            read_payload(path, max_bytes=2**20)
        assert refused.value.size > BOMB_BYTES and refused.value.limit == 2**20

    def test_a_file_larger_than_the_limit_is_refused(self, tiny_checkpoint: Path) -> None:
        """The file's own size counts too."""
        with pytest.raises(CheckpointTooLarge, match="refused unread: the file is"):
            check_archive(tiny_checkpoint, 100)

    def test_a_checkpoint_within_the_limit_reads(self, tiny_checkpoint: Path) -> None:
        """The limit is on size, not on ordinary checkpoints."""
        check_archive(tiny_checkpoint, tiny_checkpoint.stat().st_size * 10)

    def test_a_bomb_is_refused_at_registration_and_evaluation(
        self, tmp_path: Path, toy_evalset: Path
    ) -> None:
        """Registry.register and the evaluation refuse it with the configured limit."""
        path = bomb(tmp_path)
        small = Trust(TRUSTED_FACTORIES, 2**20)
        with pytest.raises(CheckpointTooLarge):
            Registry(str(tmp_path / "registry")).register(path, "bomb", trust=small)
        config = Config(
            root=str(tmp_path),
            trusted_factories=list(TRUSTED_FACTORIES),
            max_checkpoint_bytes=2**20,
        )
        outcome = evaluate_checkpoint(
            Target("bomb", str(path)),
            load_evalset(toy_evalset),
            config=config,
            run_id="r",
            week="2026-W40",
        )
        assert "refused unread: its archive inflates to" in outcome.evaluation["error"]


class TestWhatRunsIsWhatWasRegistered:
    def test_a_file_naming_another_factory_is_refused_and_its_factory_never_runs(
        self, tmp_path: Path
    ) -> None:
        """Pinned TinyNet, a file naming MarkerNet (trusted too): refused, MarkerNet never built."""
        mark = tmp_path / "built"
        path = save(tmp_path / "other.pt", "tests.models:MarkerNet", {"marker": str(mark)})
        with pytest.raises(ModelMismatch, match=r"not the pinned tests\.models:TinyNet\(\)"):
            load_checkpoint(path, trust=TRUST, factory="tests.models:TinyNet")
        assert not mark.exists()

    def test_a_file_naming_other_kwargs_is_refused(self, tmp_path: Path) -> None:
        """The same factory with other kwargs is another model."""
        path = save(tmp_path / "m.pt", "tests.models:TinyNet", {"hidden": 8})
        with pytest.raises(ModelMismatch, match=r"TinyNet\(hidden=8\), not the pinned"):
            load_checkpoint(
                path, trust=TRUST, factory="tests.models:TinyNet", factory_kwargs={"hidden": 9}
            )

    def test_an_untrusted_pinned_factory_is_refused_before_the_file_is_read(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A registry entry edited to pin an untrusted factory: refused first, nothing read."""
        path = save(tmp_path / "m.pt", "tests.models:TinyNet", {})
        monkeypatch.setattr(torch, "load", None)
        with pytest.raises(UntrustedFactory, match="'yaml:unsafe_load': not trusted"):
            load_checkpoint(path, trust=TRUST, factory="yaml:unsafe_load")

    def test_registration_refuses_a_factory_that_disagrees_with_the_file(
        self, tiny_checkpoint: Path, tmp_path: Path
    ) -> None:
        """--factory must agree with a factory the file records."""
        registry = Registry(str(tmp_path / "registry"))
        with pytest.raises(ModelMismatch):
            registry.register(tiny_checkpoint, "tiny", trust=TRUST, factory="tests.models:FlatNet")
        assert registry.models() == []

    def test_the_entry_pins_factory_and_kwargs_and_list_shows_the_factory(
        self,
        tiny_checkpoint: Path,
        chdir_tmp: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """`registry show` prints the pinned model; `registry list` its factory."""
        (chdir_tmp / "evalsentry.yaml").write_text(TRUSTED_YAML)
        assert main(["register", str(tiny_checkpoint), "--model", "tiny", "--new-model"]) == 0
        assert main(["registry", "list"]) == 0
        assert "tests.models:TinyNet" in capsys.readouterr().out
        assert main(["registry", "show", "tiny"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["lineage"]["model"] == {
            "factory": "tests.models:TinyNet",
            "kwargs": {"features": 4, "classes": 3},
        }


class TestBadModels:
    def test_a_bad_kwarg_is_one_line_at_registration(
        self, tmp_path: Path, chdir_tmp: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A factory raising on its kwargs (hidden=-1) is exit 2, one line naming it, at register."""
        (chdir_tmp / "evalsentry.yaml").write_text(TRUSTED_YAML)
        path = save(tmp_path / "m.pt", "tests.models:TinyNet", {"hidden": -1})
        assert main(["register", str(path), "--model", "m", "--new-model"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(
            "error: model factory 'tests.models:TinyNet': raised RuntimeError: "
        ) and err.endswith("when called with kwargs {'hidden': -1}")
        assert "\n" not in err

    def test_a_bad_kwarg_is_an_error_row_at_evaluation(
        self, tmp_path: Path, toy_evalset: Path
    ) -> None:
        """The same checkpoint given to an evaluation is its one-line error row."""
        path = save(tmp_path / "m.pt", "tests.models:TinyNet", {"hidden": -1})
        outcome = evaluate_checkpoint(
            Target("m", str(path)),
            load_evalset(toy_evalset),
            config=Config(root=str(tmp_path), trusted_factories=["tests.models"]),
            run_id="r",
            week="2026-W40",
        )
        assert outcome.evaluation["error"].startswith(
            "model factory 'tests.models:TinyNet': raised RuntimeError: "
        )

    @pytest.mark.parametrize(
        ("state", "error", "problem"),
        [
            ([1, 2, 3], CheckpointCorrupt, "model_state_dict is a list, not a mapping"),
            (
                dict.fromkeys(TinyNet().state_dict(), "text"),
                StateDictMismatch,
                "expected torch.Tensor",
            ),
        ],
        ids=["not-a-mapping", "not-tensors"],
    )
    def test_a_bad_state_dict_is_one_error(
        self, tmp_path: Path, state: object, error: type[Exception], problem: str
    ) -> None:
        """Weights that are no state dict, or not tensors, are one named error."""
        path = save(tmp_path / "m.pt", "tests.models:TinyNet", {}, state=state)
        with pytest.raises(error, match=problem) as refused:
            load_checkpoint(path, trust=TRUST)
        assert "\n" not in str(refused.value)


class TestRegistryEntries:
    @pytest.fixture
    def entry_file(self, tiny_checkpoint: Path, tmp_path: Path) -> Path:
        """A registered entry's file, to edit by hand."""
        Registry(str(tmp_path / "registry")).register(tiny_checkpoint, "tiny", trust=TRUST)
        return tmp_path / "registry" / "tiny" / "v000001.json"

    @pytest.mark.parametrize(
        ("field", "value", "problem"),
        [
            ("stage", "prod", "stage: 'prod' is not a stage; use one of candidate, production"),
            ("version", 2, "version: 2 does not match the file's name (tiny/v000001.json)"),
            ("model", "other", "model: 'other' does not match the file's name"),
            ("lineage", {"seed": 0}, "lineage: model.factory is missing"),
        ],
    )
    def test_an_edited_entry_is_one_line_naming_file_and_field(
        self,
        entry_file: Path,
        field: str,
        value: object,
        problem: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """show, list, resolve and the CLI refuse the entry with one line, exit 2."""
        document = json.loads(entry_file.read_text())
        document[field] = value
        entry_file.write_text(json.dumps(document))
        registry = Registry(str(entry_file.parents[1]))
        for call in (
            lambda: registry.show("tiny", 1),
            registry.list,
            lambda: registry.resolve("tiny", "candidate"),
        ):
            with pytest.raises(RegistryEntryInvalid, match=rf"^{entry_file}: ") as refused:
                call()
            assert problem in str(refused.value)
            assert isinstance(refused.value, RegistryError) and isinstance(
                refused.value, ConfigError
            )
        config = entry_file.parents[2] / "evalsentry.yaml"
        config.write_text("registry: registry\n")
        assert main(["registry", "list", "--config", str(config)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and problem in err
