"""Real runs of lm-evaluation-harness and Inspect, offline, for the import tests.

``python -m tests.harness_runs lm-eval OUT NAME=SKILL[:PROMPT][@TASKS] ...`` runs lm-eval's own
command line (``lm_eval run ... --log_samples``) once per model version on the task in
``tests/data/harnesses/lm_eval``, writing ``OUT/NAME``. The model is :class:`SumsLM`, registered
here: it reads the sum in the prompt and answers right on the share ``skill`` of the questions
(chosen by a hash of the prompt, so runs are reproducible), else one more than the sum.
``PROMPT`` (optional) replaces the task's ``doc_to_text``: a changed prompt. ``TASKS`` (optional)
is ``--tasks``: by default the one task, ``evalsentry_arith``; the folder also holds a second
task, ``evalsentry_arith_words``, and the group of both, ``evalsentry_math``.

``python -m tests.harness_runs inspect OUT NAME=SKILL[:REDUCER] ...`` runs ``inspect_ai.eval`` on
the task in ``tests/data/harnesses/inspect`` with Inspect's ``mockllm/model`` answering the same
way, two epochs, writing ``OUT/NAME/*.eval``. With ``REDUCER`` (``at_least_1``, ``max``, ...) the
epochs are reduced by it, and whether the model knows a sum is drawn afresh each epoch (so the
reducer changes the score). Neither touches the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "harnesses"
_SUM = re.compile(r"(\d+) plus (\d+)")
#: What the mock model says each Inspect call cost (USD), as a priced provider would.
COST_PER_CALL = 0.000125


def knows(prompt: str, skill: float) -> bool:
    """Whether a model of ``skill`` answers this prompt right: a fixed share of prompts."""
    return int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < skill


def answer(prompt: str, skill: float) -> int:
    """The model's answer: the sum where it knows, else one more."""
    a, b = map(int, _SUM.findall(prompt)[-1])
    return a + b if knows(prompt, skill) else a + b + 1


def run_lm_eval(out: Path, versions: list[str]) -> None:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.config.evaluate_config import EvaluatorConfig  # noqa: F401 (the CLI's own)

    @register_model("evalsentry-sums")
    class SumsLM(LM):  # type: ignore[misc]
        def __init__(self, skill: float = 1.0, **_: Any) -> None:
            super().__init__()
            self.skill = float(skill)

        @classmethod
        def create_from_arg_string(cls, arg_string: str, additional_config: Any = None) -> SumsLM:
            return cls(**dict(kv.split("=") for kv in arg_string.split(",") if kv))

        def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> list[Any]:
            out = []
            for request in requests:
                context, continuation = request.args
                chosen = int(continuation.strip()) == answer(context, self.skill)
                out.append((-0.1 if chosen else -5.0, chosen))
            return out

        def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> list[Any]:
            return [-1.0 for _ in requests]

        def generate_until(self, requests: Any, disable_tqdm: bool = False) -> list[str]:
            return [str(answer(r.args[0], self.skill)) for r in requests]

    import lm_eval.tasks
    from lm_eval.__main__ import cli_evaluate

    class OwnTasksOnly(lm_eval.tasks.TaskManager):  # type: ignore[misc]
        """The command line's task manager without lm-eval's ~26,000 built-in task files.

        Indexing them takes about 7 s per run; the task run here comes from --include_path.
        """

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    lm_eval.tasks.TaskManager = OwnTasksOnly  # the CLI imports it from here when it runs

    for version in versions:
        name, _, spec = version.partition("=")
        spec, _, tasks = spec.partition("@")
        skill, _, prompt = spec.partition(":")
        task = out / f"{name}-task"
        shutil.copytree(DATA / "lm_eval", task)
        if prompt:
            yaml = task / "arith.yaml"
            text = re.sub(r'doc_to_text: ".*"', f"doc_to_text: {prompt!r}", yaml.read_text())
            yaml.write_text(text)
        os.chdir(task)  # lm-eval resolves the task's data_files from here
        sys.argv = ["lm_eval", "run", "--model", "evalsentry-sums", "--model_args",
                    f"skill={skill}", "--tasks", tasks or "evalsentry_arith", "--include_path", str(task),
                    "--output_path", str(out / name), "--log_samples"]  # fmt: skip
        cli_evaluate()


def run_inspect(out: Path, versions: list[str]) -> None:
    from inspect_ai import Epochs
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    sys.path.insert(0, str(DATA / "inspect"))
    from arith_task import arith

    for version in versions:
        name, _, spec = version.partition("=")
        skill, _, reducer = spec.partition(":")
        calls: Counter[str] | None = Counter() if reducer else None

        def reply(
            messages: Any, *_: Any, level: float = float(skill), seen: Counter[str] | None = calls
        ) -> ModelOutput:
            prompt = messages[-1].text
            asked = prompt
            if seen is not None:  # with a reducer, each epoch's answer is drawn afresh
                seen[prompt] += 1
                asked = f"{prompt} #{seen[prompt]}"
            text = str(answer(asked, level))
            output = ModelOutput.from_content(model="mockllm/model", content=text)
            output.usage = ModelUsage(
                input_tokens=14, output_tokens=2, total_tokens=16, total_cost=COST_PER_CALL
            )
            return output

        model = get_model("mockllm/model", custom_outputs=reply, skill=skill)
        epochs = Epochs(2, reducer) if reducer else 2
        logs = inspect_eval(
            arith(), model=model, log_dir=str(out / name), epochs=epochs, display="none"
        )
        assert logs[0].status == "success", logs[0].error


if __name__ == "__main__":
    harness, folder, *wanted = sys.argv[1:]
    target = Path(folder).resolve()
    target.mkdir(parents=True, exist_ok=True)
    {"lm-eval": run_lm_eval, "inspect": run_inspect}[harness](target, wanted)
