"""The serving levers on the shipped examples: each variant's quality change and cost ratio.

    python -m bench.bench_levers [--quick]

In a temporary project, through the CLI a team uses:

- digits: the CNN (v1, production), its ``dynamic-int8`` and ``bf16`` variants, a distilled
  student (8 channels, hidden 32: ``examples.digits.distill``) and that student with its weights
  naively rounded to 2 bits (damaged);
- textlm: the byte-level language model (v1, production) and its ``dynamic-int8`` and ``bf16``
  variants, on the perplexity evalset.

Each is evaluated with ``evalsentry evaluate --model LINE --version N``: quality gated against
production, cost timed paired against the version it was made from (alternating rounds in one
process). Reported per variant: the change of the line's headline metric (accuracy in points,
perplexity in percent), the weighed row's verdict and its median time ratio with the rounds'
range. The table is also written to ``bench/results/levers.md``. ``--quick``: fewer epochs and
the small language model (the ratios hold; the quality numbers are a smaller model's).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).parents[1]
TABLE = REPO / "bench" / "results" / "levers.md"


def _cli(*args: str) -> str:
    """``evalsentry ARGS`` in this process; what it printed. Exit 2 (refused) stops the bench."""
    from evalsentry.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    if code == 2:  # 1 is a gate's FAIL: the damaged student's, as expected
        raise RuntimeError(f"evalsentry {' '.join(args)}: {err.getvalue().strip()}")
    return out.getvalue()


def _project(root: Path, quick: bool) -> None:
    """The two lines, trained with the examples' own code and registered with their levers."""
    from examples.digits.distill import distill
    from examples.digits.train import train
    from examples.textlm.evalsets import freeze_perplexity
    from examples.textlm.train import SMALL
    from examples.textlm.train import train as train_lm

    shutil.copytree(REPO / "evalsets" / "digits", root / "evalsets" / "digits")
    freeze_perplexity(root / "evalsets", "text")
    (root / "evalsentry.yaml").write_text(
        "store: store\nregistry: registry\nevalsets: evalsets\n"
        "trusted_factories: [examples.digits.model, examples.textlm.model]\n"
        "models:\n  digits: {evalsets: [digits]}\n  textlm: {evalsets: [text]}\n"
        "traffic:\n  digits: {requests_per_day: 1000000}\n  textlm: {requests_per_day: 100000}\n"
    )
    out = root / "checkpoints"
    teacher = train(out / "digits.pt", seed=1, epochs=5 if quick else 20)
    lm = train_lm(out / "textlm.safetensors", seed=1, **(SMALL if quick else {}))  # type: ignore[arg-type]
    epochs = 15 if quick else 60
    student = distill(teacher, out / "student.pt", seed=1, epochs=epochs)
    damaged = distill(teacher, out / "damaged.pt", seed=1, epochs=epochs, round_bits=2)
    _cli("register", str(teacher), "--model", "digits", "--stage", "production", "--new-model")
    _cli("register", str(lm), "--model", "textlm", "--stage", "production", "--new-model")
    for line in ("digits", "textlm"):
        for transform in ("dynamic-int8", "bf16"):
            _cli("register", "--variant-of", f"{line}@v1", "--transform", transform)
    _cli("register", str(student), "--model", "digits")
    _cli("register", str(damaged), "--model", "digits")
    _cli("run", "--week", "2026-W01")


def _weighed(root: Path, line: str, version: int) -> dict[str, Any]:
    """Evaluate ``line@vN`` and read its weighed row and headline comparison from the history."""
    from evalsentry.evaluation.serving import said_in
    from evalsentry.history.store import History

    _cli("evaluate", "--model", line, "--version", str(version))
    rows = History(str(root / "store")).comparisons()
    rows = rows[(rows["model"] == line) & (rows["version"] == version)]
    rows = rows[rows["slice"].fillna("") == ""]  # the whole evalset, not its slices
    weighed = rows[rows["metric"] == "microseconds_per_example"].iloc[-1]
    headline = "accuracy" if line == "digits" else "perplexity"
    quality = rows[(rows["metric"] == headline) & (rows["reference"] == "production")].iloc[-1]
    reason = str(weighed["reason"])
    said = said_in(reason)
    change = float(quality["delta"]) * 100
    unit = " pts"
    if headline == "perplexity":
        change, unit = change / float(quality["reference_value"]), "%"
    return {
        "variant": f"{line}@v{version} ({said.made} of v{int(weighed['reference_version'])})",
        "verdict": said.word or f"{weighed['verdict']}: {_quality_said(reason)}",
        "quality": f"{headline} {change:+.2f}{unit} ({quality['verdict']})",
        "change": change,
        "ratio": float("nan") if said.ratio is None else said.ratio,
        "low": float("nan") if said.low is None else said.low,
        "high": float("nan") if said.high is None else said.high,
    }


def _quality_said(reason: str) -> str:
    """``quality not held (accuracy -57.58 pts ...)`` from a weighed row's reason."""
    said = reason.split("): ", 1)[-1]
    return said.split("; cost not weighed")[0]


def run(quick: bool = False) -> dict[str, float]:
    """Each lever's quality change and median time ratio; the table written to ``TABLE``."""
    previous, sha = Path.cwd(), os.environ.get("EVALSENTRY_GIT_SHA")
    with tempfile.TemporaryDirectory(prefix="evalsentry-levers-") as tmp:
        root = Path(tmp)
        os.environ["EVALSENTRY_GIT_SHA"] = sha or "0" * 40  # a temporary folder has no git
        os.chdir(root)
        try:
            _project(root, quick)
            found = [_weighed(root, "digits", v) for v in (2, 3, 4, 5)]
            found += [_weighed(root, "textlm", v) for v in (2, 3)]
        finally:
            os.chdir(previous)
            if sha is None:
                del os.environ["EVALSENTRY_GIT_SHA"]
    lines = [
        "| variant | quality vs production | verdict | time per example vs parent |",
        "|---|---|---|---|",
    ]
    for f in found:
        ratio = f"{f['ratio']:.2f}x ({f['low']:.2f}x to {f['high']:.2f}x)"
        lines.append(f"| {f['variant']} | {f['quality']} | {f['verdict']} | {ratio} |")
    print("\n".join(lines))
    if not quick:
        TABLE.write_text("# Serving levers (`python -m bench.bench_levers`)\n\n" + "\n".join(lines) + "\n")  # fmt: skip
    results: dict[str, float] = {}
    for f in found:
        key = re.sub(r"\W+", "_", f["variant"]).strip("_")
        results[f"{key}_ratio"] = f["ratio"]
        results[f"{key}_quality_change"] = f["change"]
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for name, value in run(args.quick).items():
        print(f"{name:50s} {value:10.3f}")
