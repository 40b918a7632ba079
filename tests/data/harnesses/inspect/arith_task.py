"""A small Inspect task for the import tests: two-number sums, matched, grouped by passage."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate

PROMPT = "What is {a} plus {b}? Answer with the number only."


def _sample(record: dict[str, object]) -> Sample:
    a, b = int(str(record["a"])), int(str(record["b"]))
    return Sample(
        id=str(record["id"]),
        input=PROMPT.format(a=a, b=b),
        target=str(a + b),
        metadata={"passage": record["passage"]},
    )


@task
def arith() -> Task:
    """Sums, scored by Inspect's match()."""
    data = Path(__file__).with_name("arith.jsonl")
    return Task(
        dataset=json_dataset(str(data), _sample), solver=generate(), scorer=match(), version=1
    )
