"""The model contract's output side, and what a broken model is told.

A model's output is checked against what the evalset's task needs (``check_output``); an output
that breaks the contract is an ``OutputContractViolation`` saying what was expected and what
came. A forward that raises on the first batch is run once more with hooks on the shape-bearing
layers (``diagnose``) to name the layer that refused its input (``InputMismatch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalsentry.errors import UsageError, exception_line

if TYPE_CHECKING:
    import torch

    from evalsentry.evalsets.evalset import EvalsetSpec


OUTPUT_ITEMS_SHOWN = 3  # items of a tuple or list output described in a contract violation


CLASSES_SHOWN = 10  # class names listed in an output contract violation


class ModelFailed(UsageError):
    """The model under evaluation broke: its forward raised, or its output breaks the contract."""


class ForwardRaised(ModelFailed):
    """The model's ``forward`` raised; ``error`` is the exception, ``first_example`` its batch."""

    def __init__(self, error: BaseException, first_example: int) -> None:
        self.error, self.first_example = error, first_example
        super().__init__(
            f"the model's forward raised {exception_line(error)} "
            f"(batch starting at example {first_example})"
        )


class OutputContractViolation(ModelFailed):
    """The model's output is not what the evalset's task needs: what was expected, what came."""

    def __init__(self, expected: str, got: str) -> None:
        self.expected, self.got = expected, got
        super().__init__(f"model output breaks the contract: expected {expected}, got {got}")


class InputMismatch(ModelFailed):
    """The model was built for other inputs: a layer refused the evalset's tensor.

    ``layer`` names it (``the model's first layer (Linear 'net.0')``), ``expects`` what it takes
    (``13 features``), ``got`` what reached it (``float32 [64, 30]``), ``gives`` the evalset's
    side (``the evalset 'cancer' gives float32 [N, 30] (30 feature columns)``).
    """

    def __init__(self, layer: str, expects: str, got: str, gives: str, *, first: bool) -> None:
        self.layer, self.expects, self.got, self.gives = layer, expects, got, gives
        # Past the first layer the input got in, so the model's own layers may be what disagree.
        doubt = "" if first else "the model was built for other inputs, or its layers disagree; "
        super().__init__(
            f"input shape mismatch: {layer} takes {expects}, got {got}; {gives}: {doubt}bind "
            "the model to an evalset of the inputs it was built for (models: in evalsentry.yaml)"
        )


def check_output(out: object, rows: int, spec: EvalsetSpec) -> None:
    """Check one batch's output against the task's contract, before any metric reads it.

    Raises:
        OutputContractViolation: naming the expected and the actual type, dtype and shape.
    """
    import torch

    fits = False
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        shape = tuple(out.shape)
        if spec.task not in ("classification", "multilabel"):
            fits = shape in ((rows,), (rows, 1))
        else:  # examples x classes (multi-label: x labels)
            width = len(spec.classes) if spec.classes is not None else None
            fits = len(shape) == 2 and shape[0] == rows and width in (None, shape[1])
    if not fits:
        raise OutputContractViolation(expected_output(rows, spec), describe_output(out))
    if (
        spec.task == "classification"
        and isinstance(out, torch.Tensor)
        and looks_like_probabilities(out) != (spec.outputs == "probabilities")
    ):
        raise OutputContractViolation(
            expected_output(rows, spec),
            "probabilities (every row non-negative and summing to 1): return the logits "
            "before the softmax, or freeze the evalset with --outputs probabilities"
            if spec.outputs == "logits"
            else "rows that are not probabilities (each must be non-negative and sum to 1)",
        )


#: How far a row of probabilities may sum from 1 (float32 softmax over thousands of classes).
PROBABILITY_SUM_TOLERANCE = 1e-3


def looks_like_probabilities(out: torch.Tensor) -> bool:
    """Whether every row of ``out`` is non-negative and sums to 1: a softmax's output."""
    import torch

    values = out.detach().float()
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        return False
    return bool(((values.sum(dim=1) - 1).abs() <= PROBABILITY_SUM_TOLERANCE).all())


def expected_output(rows: int, spec: EvalsetSpec) -> str:
    """The output contract for a batch of ``rows`` examples of ``spec``, in words."""
    if spec.task == "multilabel":
        return (
            f"float {spec.outputs} of shape [{rows}, {len(spec.classes or [])}] (one column per "
            f"label of {spec.name!r}, scored independently)"
        )
    if spec.task != "classification":
        return f"float predictions of shape [{rows}] or [{rows}, 1] (one per example)"
    if spec.classes is None:
        return f"float {spec.outputs} of shape [{rows}, C] (one column per class)"
    shown = ", ".join(str(c) for c in spec.classes[:CLASSES_SHOWN])
    more = f", ... ({len(spec.classes)} in all)" if len(spec.classes) > CLASSES_SHOWN else ""
    return (
        f"float {spec.outputs} of shape [{rows}, {len(spec.classes)}] (one column per class of "
        f"{spec.name!r}, in order: {shown}{more})"
    )


def describe_output(out: Any) -> str:
    """What a model returned, in a few words: ``a float32 tensor of shape [512, 7]``."""
    import torch

    if isinstance(out, torch.Tensor):
        shape = ", ".join(str(d) for d in out.shape)
        what = f"{str(out.dtype).removeprefix('torch.')} tensor of shape [{shape}]"
    elif isinstance(out, tuple | list):
        items = ", ".join(describe_output(item) for item in out[:OUTPUT_ITEMS_SHOWN])
        more = ", ..." if len(out) > OUTPUT_ITEMS_SHOWN else ""
        what = f"{type(out).__name__} of {len(out)} ({items}{more})"
    else:
        what = type(out).__name__
    return ("an " if what[0] in "aeiou" else "a ") + what


def _shape(tensor: torch.Tensor) -> str:
    """``float32 [64, 30]``."""
    return f"{str(tensor.dtype).removeprefix('torch.')} [{', '.join(map(str, tensor.shape))}]"


def _refusal(module: torch.nn.Module, x: torch.Tensor) -> tuple[str, str] | None:
    """What a shape-bearing layer takes and what of ``x`` it cannot take, or None if it fits."""
    from torch import nn

    takes, fits = "", True
    if isinstance(module, nn.Linear):
        takes = f"{module.in_features} features"
        fits = x.dim() >= 1 and x.shape[-1] == module.in_features
    elif isinstance(module, nn.modules.conv._ConvNd):
        spatial = len(module.kernel_size)
        dims = ", ".join(["N", "C", *("L" if spatial == 1 else "HW" if spatial == 2 else "DHW")])
        takes = f"{module.in_channels} channels as [{dims}]"
        # A conv takes [N, C, *spatial] or, unbatched, [C, *spatial].
        fits = x.dim() in (spatial + 1, spatial + 2) and x.shape[-spatial - 1] == module.in_channels
    elif isinstance(module, nn.Embedding):
        takes = f"integer token ids 0..{module.num_embeddings - 1}"
        fits = not x.is_floating_point() and (
            x.numel() == 0 or (int(x.min()) >= 0 and int(x.max()) < module.num_embeddings)
        )
        if not fits and not x.is_floating_point():
            return takes, f"{_shape(x)} with ids {int(x.min())}..{int(x.max())}"
    return None if fits else (takes, _shape(x))


def diagnose(
    model: torch.nn.Module, batch: torch.Tensor, spec: EvalsetSpec
) -> InputMismatch | None:
    """Why the first batch's forward raised, when a layer refused the input's shape.

    Runs the forward once more with hooks on the shape-bearing layers: the one entered and not
    left is where it raised; if it raised outside any of them (a ``view`` in ``forward``), the
    first layer is checked against the batch, flattened or not. None: no layer to blame.
    """
    from torch import nn

    kinds = (nn.Linear, nn.modules.conv._ConvNd, nn.Embedding)
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, kinds)]
    if not layers:
        return None
    open_calls = _open_when_raised(model, batch, layers)
    if open_calls is None:
        return None  # it ran this time: not a shape the model refuses
    first_name, first = layers[0]
    gives = f"the evalset {spec.name!r} gives {spec.inputs.contract()}"
    if open_calls:
        name, module, x = open_calls[-1]
        refusal = _refusal(module, x)
        if refusal is None:
            return None
        which = "first layer" if module is first else "layer"
        if x.shape != batch.shape or x.dtype != batch.dtype:
            gives += f", this batch {_shape(batch)}"
        return InputMismatch(
            f"the model's {which} ({type(module).__name__} {name!r})",
            *refusal,
            gives,
            first=module is first,
        )
    refusal = _refusal(first, batch)
    flat = batch.flatten(1) if batch.dim() > 2 else batch
    if refusal is None or _refusal(first, flat) is None:
        return None
    return InputMismatch(
        f"the model's first layer ({type(first).__name__} {first_name!r})",
        *refusal,
        gives,
        first=True,
    )


def _open_when_raised(
    model: torch.nn.Module, batch: torch.Tensor, layers: Sequence[tuple[str, torch.nn.Module]]
) -> list[tuple[str, torch.nn.Module, torch.Tensor]] | None:
    """The layer calls the forward was inside when it raised; None if it ran this time.

    Runs it again with hooks on ``layers``: each call entered and not left, innermost last,
    with the input it got.
    """
    import torch
    from torch import nn

    open_calls: list[tuple[str, nn.Module, torch.Tensor]] = []

    def enter(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            if args and isinstance(args[0], torch.Tensor):
                open_calls.append((name, module, args[0]))

        return hook

    def leave(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if open_calls and open_calls[-1][1] is module:
            open_calls.pop()

    handles = [m.register_forward_pre_hook(enter(name)) for name, m in layers]
    handles += [m.register_forward_hook(leave) for _, m in layers]
    try:
        model(batch)
    except Exception:  # noqa: BLE001, S110 - the failure is known; only where it happened is sought
        pass
    else:
        return None
    finally:
        for handle in handles:
            handle.remove()
    return open_calls
