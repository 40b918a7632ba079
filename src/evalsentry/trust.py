"""Which code may build a model from a checkpoint, and how large a checkpoint may be.

A checkpoint names the factory that rebuilds its architecture (``package.module:callable``),
with keyword arguments. That name is the checkpoint's word, and a checkpoint is data: nothing it
names is imported unless the project trusts it, in ``trusted_factories`` of ``evalsentry.yaml``:

- a module name (``examples.digits.model``) trusts every ``torch.nn.Module`` subclass defined
  in that module; not the names it imports from elsewhere, not its submodules, not its
  functions;
- ``module:attr`` trusts that one callable, and is the only way to trust a plain function.

The name is checked against the list before anything is imported, a class is checked to be an
``nn.Module`` subclass before it is called, and what a function returns is checked to be a
model. Factories from the standard library, ``torch`` or ``builtins`` stay refused even when
listed (``subprocess:run``, ``torch.hub:load``): defence in depth behind the list.

``max_checkpoint_bytes`` bounds reading: the file, and the uncompressed sizes its zip archive
declares, are checked before anything is inflated (``evalsentry.checkpoints.payload.check_archive``).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsentry.errors import FactoryError, UntrustedFactory, did_you_mean

#: Generous: 8 GiB holds two billion float32 parameters (about 700 million with Adam's state
#: saved beside them), far beyond the models a weekly evaluation runs, while the worker that
#: reads a checkpoint this size at most doubles it in memory (the tensors, then the model).
DEFAULT_MAX_CHECKPOINT_BYTES = 8 * 2**30
#: Top-level packages a factory may never come from, listed or not: calling into them with
#: checkpoint-supplied keyword arguments could run commands or fetch code.
_FORBIDDEN_FACTORY_ROOTS = frozenset(sys.stdlib_module_names) | {"torch", "builtins"}
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
#: An entry of ``trusted_factories``: a module name, or ``module:attr``.
TRUSTED_ENTRY = re.compile(rf"{_DOTTED}(?::{_DOTTED})?")


@dataclass(frozen=True)
class Trust:
    """What a checkpoint may use: the trusted factories, and the size it may inflate to.

    ``Config.trust`` builds it from ``evalsentry.yaml``; code without a config passes one
    explicitly. The default trusts nothing: every factory is refused.

    Attributes:
        factories: module names and ``module:attr`` entries (``trusted_factories``).
        max_checkpoint_bytes: limit on a checkpoint file and on what its archive inflates to.
        config_file: where the list is kept, named in refusals.
        project: the folder holding ``config_file``: trusted modules are imported from it
            first (a team's ``models.py`` beside its ``evalsentry.yaml``), from any working
            directory and in any worker process.
    """

    factories: tuple[str, ...] = ()
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES
    config_file: str = "evalsentry.yaml"
    project: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "factories", tuple(self.factories))  # a list is fine too

    def check(self, factory: object) -> tuple[str, str]:
        """Refuse ``factory`` unless it, or its module, is listed; nothing is imported.

        Returns:
            The module name and the attribute path.

        Raises:
            FactoryError: not of the form ``package.module:callable``.
            UntrustedFactory: neither the factory nor its module is in ``factories``.

        """
        module, attr = parse_factory(factory)
        spec = f"{module}:{attr}"
        if spec not in self.factories and module not in self.factories:
            raise UntrustedFactory(
                spec,
                f"not trusted, nothing was imported; add the module {module!r} or {spec!r} "
                f"to trusted_factories in {self.config_file}",
            )
        return module, attr

    def resolve(self, factory: str) -> Callable[..., Any]:
        """The callable ``factory`` names, imported only once ``check`` admits it.

        Raises:
            FactoryError: see ``check``; from the standard library or torch, unimportable,
                missing, not callable, or a class that is not a ``torch.nn.Module`` subclass.
            UntrustedFactory: see ``check``; or only the module is listed and the callable is
                not an ``nn.Module`` subclass defined in it.

        """
        import torch

        module, _ = self.check(factory)
        if self.project:
            _import_from_project(module, self.project)
        target = import_factory(factory)
        if isinstance(target, type):
            if not issubclass(target, torch.nn.Module):
                raise FactoryError(factory, "is a class but not a torch.nn.Module subclass")
            if factory in self.factories or target.__module__ == module:
                return target
            problem = f"is defined in {target.__module__!r}, not in the trusted module {module!r}"
        elif factory in self.factories:
            return target
        else:
            problem = "is not a torch.nn.Module class, and a trusted module admits only those"
        raise UntrustedFactory(
            factory, f"{problem}; add {factory!r} itself to trusted_factories in {self.config_file}"
        )


def _import_from_project(module: str, project: str) -> None:
    """Import ``module``'s top-level package from the project folder, when it is there.

    The project's own module wins whatever ``sys.path`` says: a file of the same name in the
    working folder or on ``PYTHONPATH`` never stands in for it. The folder also joins
    ``sys.path`` (after the standard library), so the module's own imports of its neighbours
    resolve.

    Raises:
        FactoryError: the name is already imported from somewhere else (it cannot be swapped).
    """
    top = module.partition(".")[0]
    spec = importlib.machinery.PathFinder.find_spec(top, [project])
    if spec is None or spec.loader is None:
        return  # not the project's: an installed package, imported as usual
    if project not in sys.path:
        sys.path[:] = import_path([*sys.path, project])
    loaded = sys.modules.get(top)
    if loaded is not None:
        ours, theirs = _real_location(spec), _real_location(loaded.__spec__)
        if not ours or ours != theirs:
            raise FactoryError(
                module,
                f"the project's {top!r} ({', '.join(ours)}) cannot be imported: a module of that "
                f"name is already loaded from {', '.join(theirs) or 'elsewhere'}; rename one of them",
            )
        return
    found = importlib.util.module_from_spec(spec)
    sys.modules[top] = found
    try:
        spec.loader.exec_module(found)
    except BaseException:
        sys.modules.pop(top, None)
        raise


def _real_location(spec: importlib.machinery.ModuleSpec | None) -> list[str]:
    """Where a module's code really is: its file, or a namespace package's folders, resolved.

    Resolved, so a project folder reached through a symbolic link is the same module however
    its path was spelled when it was first imported.
    """
    if spec is None:
        return []
    if spec.has_location and spec.origin:
        return [str(Path(spec.origin).resolve())]
    return sorted(str(Path(p).resolve()) for p in spec.submodule_search_locations or [])


def _is_stdlib(entry: str) -> bool:
    """Whether a ``sys.path`` entry is the standard library's (under the base prefix)."""
    if not entry:
        return False
    path = Path(entry).absolute()
    return path.is_relative_to(Path(sys.base_prefix).absolute()) and not any(
        part in ("site-packages", "dist-packages") for part in path.parts
    )


def import_path(path: list[str]) -> list[str]:
    """A ``sys.path`` for code that imports on a checkpoint's behalf.

    The standard library first, so that nothing of the same name elsewhere (a ``queue.py``
    beside a checkpoint, a ``PYTHONPATH`` folder) shadows it; never ``''``, the working folder
    of the moment; otherwise the order as given, each entry once.
    """
    kept = list(dict.fromkeys(entry for entry in path if entry))
    return [e for e in kept if _is_stdlib(e)] + [e for e in kept if not _is_stdlib(e)]


def parse_factory(factory: object) -> tuple[str, str]:
    """``package.module:callable`` split into module and attribute path.

    Raises:
        FactoryError: anything else.

    """
    if isinstance(factory, str) and (match := TRUSTED_ENTRY.fullmatch(factory)) and ":" in factory:
        module, _, attr = match.group(0).partition(":")
        return module, attr
    raise FactoryError(str(factory), "use the form 'package.module:callable'")


def import_factory(factory: str) -> Callable[..., Any]:
    """Import ``package.module:callable``, whoever named it.

    Only for names that are not a checkpoint's word (``save_checkpoint``'s own factory), or
    after ``Trust.check`` admitted them.

    Raises:
        FactoryError: malformed, from the standard library or torch, unimportable, missing
            attribute (with a did-you-mean), or not callable.

    """
    module_name, attr = parse_factory(factory)
    if module_name.split(".")[0] in _FORBIDDEN_FACTORY_ROOTS:
        raise FactoryError(factory, "factories from the standard library or torch are not allowed")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryError(factory, f"cannot import module {module_name!r} ({exc})") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            public = [n for n in dir(target) if not n.startswith("_")]
            raise FactoryError(factory, f"no attribute {part!r}.{did_you_mean(part, public)}")
        target = getattr(target, part)
    if not callable(target):
        raise FactoryError(factory, "is not callable")
    return target  # type: ignore[no-any-return]
