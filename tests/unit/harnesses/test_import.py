"""evalsentry import lm-eval / inspect on real harness logs: recorded, paired, gated, refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalsentry.cli import main
from evalsentry.history.store import History

LM_TASK = "lm-eval.evalsentry_arith"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI's exit code, stdout and stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def lm_folder(logs: Path, version: str) -> str:
    return str(logs / "lm" / version)


def inspect_log(logs: Path, version: str) -> str:
    return str(next((logs / "inspect" / version).glob("*.eval")))


def history(project: Path) -> History:
    return History(str(project.parent / "store"))


def import_lm(capsys: pytest.CaptureFixture[str], project: Path, folder: str, week: str, *extra: str) -> tuple[int, str, str]:  # fmt: skip
    return run(capsys, "import", "lm-eval", folder, "--model", "sums", "--week", week, "--config", str(project), *extra)  # fmt: skip


def import_inspect(capsys: pytest.CaptureFixture[str], project: Path, path: str, week: str, *extra: str) -> tuple[int, str, str]:  # fmt: skip
    return run(capsys, "import", "inspect", path, "--model", "sums", "--week", week, "--config", str(project), *extra)  # fmt: skip


class TestLmEval:
    def test_a_degraded_version_fails_and_a_harmless_one_passes(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two real runs of one model pass the gate; a version right on half the sums fails it."""
        for version, week in (("good", "2026-W40"), ("same", "2026-W41")):
            code, out, err = import_lm(capsys, project, lm_folder(harness_logs, version), week)
            assert code == 0, err
            assert f"on {LM_TASK} in {week}: 40 examples, score:acc 1.0000" in out
            assert "(from lm-eval 0.4.13; no tokens or cost in its log)" in out
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 0 and "PASS" in out and "FAIL" not in out
        code, out, _ = import_lm(capsys, project, lm_folder(harness_logs, "worse"), "2026-W42")
        assert code == 0 and "score:acc 0.5" in out
        code, out, _ = run(capsys, "gate", "--week", "2026-W42", "--config", str(project))
        assert code == 1
        assert "FAIL" in out and "score:acc" in out and "-18/+0" in out

    def test_rows_pair_on_doc_hash_and_carry_the_runs_lineage(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Example ids are lm-eval's doc hashes; the row names the harness, task hash and seed."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        store = history(project)
        row = store.evaluations().iloc[0]
        samples = next((harness_logs / "lm" / "good").rglob("samples_*.jsonl"))
        hashes = sorted(json.loads(line)["doc_hash"] for line in samples.read_text().splitlines())
        predictions = store.predictions(row["evaluation_id"])
        assert predictions is not None
        assert sorted(predictions["example_id"].tolist()) == hashes
        lineage = json.loads(row["config_json"])
        assert lineage["harness"] == "lm-eval" and lineage["harness_version"] == "0.4.13"
        assert lineage["task_hash"] and lineage["model_args"] == {"skill": 1.0}
        assert row["seed"] == 0 and row["stage"] == "production" and row["kind"] == "scheduled"
        assert row["n_examples"] == 40 and row["wall_s"] > 0

    def test_a_changed_prompt_is_not_comparable(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same documents under another prompt template are an ERROR naming the prompt."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        assert import_lm(capsys, project, lm_folder(harness_logs, "prompt"), "2026-W41")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 2
        assert "ERROR" in out and "PASS" not in out
        reason = "not comparable: 40 of 40 prompts changed (prompt_hash differs): doc "
        assert reason in out and "'What is " in out and "and 37 more" in out

    def test_another_harness_version_is_refused_unless_allowed(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A run of lm-eval 0.4.12 after one of 0.4.13 is refused; --allow-harness-change records it."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        older = tmp_path / "older"
        shutil.copytree(lm_folder(harness_logs, "same"), older)
        results = next(older.rglob("results_*.json"))
        results.write_text(results.read_text().replace('"0.4.13"', '"0.4.12"'))
        code, _, err = import_lm(capsys, project, str(older), "2026-W41")
        assert code == 2 and "lm-eval 0.4.13" in err and "--allow-harness-change" in err
        assert len(history(project).evaluations()) == 1
        code, _, _ = import_lm(capsys, project, str(older), "2026-W41", "--allow-harness-change")
        assert code == 0 and len(history(project).evaluations()) == 2

    def test_the_html_report_lists_the_flipped_examples(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The week's report shows the degraded run's newly wrong documents by doc hash."""
        import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")
        import_lm(capsys, project, lm_folder(harness_logs, "worse"), "2026-W41")
        page = tmp_path / "report.html"
        code, _, err = run(capsys, "report", "--week", "2026-W41", "--out", str(page), "--config", str(project))  # fmt: skip
        assert code == 0, err
        html = page.read_text()
        predictions = history(project).predictions(history(project).evaluations(weeks=["2026-W41"]).iloc[0]["evaluation_id"])  # fmt: skip
        assert predictions is not None
        wrong = predictions["example_id"][predictions["prediction"] == 0]
        assert len(wrong) == 18
        assert "Flips against the previous week" in html and str(wrong[0])[:12] in html
        first = int(np.flatnonzero(predictions["prediction"] == 0)[0])
        assert "Newly wrong, the first 8" in html
        question, expected = predictions["question"][first], predictions["expected"][first]
        doc = predictions["doc_id"][first]
        assert question.startswith("What is ") and f"<td>doc {doc}</td>" in html
        assert f"<td>{question}</td><td>{expected}</td><td>{int(expected) + 1}</td>" in html


class TestClustered:
    def test_the_gate_clusters_by_passage_when_both_runs_carry_it(
        self,
        harness_logs: Path,
        project: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """Imported with --cluster passage, the gate tests whole passages and says so."""
        for version, week in (("good", "2026-W40"), ("worse", "2026-W41")):
            folder = lm_folder(harness_logs, version)
            assert import_lm(capsys, project, folder, week, "--cluster", "passage")[0] == 0
        row = history(project).evaluations().iloc[-1]
        metric = history(project).metrics([row["evaluation_id"]]).iloc[0]
        assert metric["ci_high"] - metric["ci_low"] > 0.2  # 10 passages resampled, not 40 sums
        junit = tmp_path / "gate.xml"
        args = ("gate", "--week", "2026-W41", "--junit", str(junit), "--config", str(project))
        code, out, _ = run(capsys, *args)
        assert code == 1 and "FAIL" in out and "-18/+0" in out
        assert "clustered by passage: 10 clusters" in out
        assert "cluster-sign-flip" in junit.read_text()

    def test_clusters_on_one_side_only_are_refused(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The reference grouped by passage, this week's run not: an unclustered test would be
        too narrow for grouped examples, so it is an ERROR saying how to import them."""
        good, worse = lm_folder(harness_logs, "good"), lm_folder(harness_logs, "worse")
        assert import_lm(capsys, project, good, "2026-W40", "--cluster", "passage")[0] == 0
        assert import_lm(capsys, project, worse, "2026-W41")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 2 and "FAIL" not in out
        assert (
            "not comparable: only the reference is grouped into clusters (by passage); import "
            "both runs with --cluster passage, or neither" in out
        )


class TestInspect:
    def test_a_degraded_version_fails_and_a_harmless_one_passes(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two real Inspect runs of one model pass; a version right on half the sums fails."""
        for version, week in (("good", "2026-W40"), ("same", "2026-W41")):
            code, out, err = import_inspect(
                capsys, project, inspect_log(harness_logs, version), week
            )
            assert code == 0, err
            assert "30 examples, score:match 1.0000" in out
            assert out.rstrip().endswith("(from inspect 0.3.285)")  # tokens and cost logged
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 0 and "PASS" in out
        assert (
            import_inspect(capsys, project, inspect_log(harness_logs, "worse"), "2026-W42")[0] == 0
        )
        code, out, _ = run(capsys, "gate", "--week", "2026-W42", "--config", str(project))
        assert code == 1 and "FAIL" in out and "score:match" in out

    def test_epochs_are_averaged_and_usage_recorded(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two epochs of 30 samples are 30 examples of 2 repeats; tokens come from model_usage."""
        assert (
            import_inspect(capsys, project, inspect_log(harness_logs, "good"), "2026-W40")[0] == 0
        )
        row = history(project).evaluations().iloc[0]
        predictions = history(project).predictions(row["evaluation_id"])
        assert predictions is not None
        assert sorted(predictions["example_id"].tolist()) == [f"q{i:03d}" for i in range(30)]
        assert set(predictions["repeats"].tolist()) == {2}
        assert row["input_tokens"] == 14 * 60 and row["output_tokens"] == 2 * 60
        lineage = json.loads(row["config_json"])
        assert lineage["harness"] == "inspect" and lineage["packages"]["inspect_ai"] == "0.3.285"
        assert lineage["model"] == "mockllm/model" and lineage["epochs"] == 2

    @pytest.mark.parametrize(
        ("field", "value"), [("output_tokens", -5), ("total_cost", -999999.98)]
    )
    def test_a_negative_count_or_cost_is_refused(
        self,
        harness_logs: Path,
        project: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        field: str,
        value: float,
    ) -> None:
        """A bill that goes down is a forged log: refused naming model and field, nothing kept."""
        from inspect_ai.log import read_eval_log, write_eval_log

        log = read_eval_log(inspect_log(harness_logs, "good"))
        assert log.stats is not None
        (model, usage) = next(iter(log.stats.model_usage.items()))
        setattr(usage, field, value)
        forged = tmp_path / "forged.eval"
        write_eval_log(log, str(forged))
        code, _, err = import_inspect(capsys, project, str(forged), "2026-W40")
        assert code == 2 and err.count("\n") == 1
        assert f"stats.model_usage.{model}.{field}: {value!r} is not a count or cost" in err
        assert history(project).evaluations().empty


def gate_reason(capsys: pytest.CaptureFixture[str], project: Path, week: str) -> str:
    """The reason of the week's one comparison (an ERROR), which `gate` prints whole."""
    from evalsentry.config import load_config
    from evalsentry.gate.week import gate_project_week

    report = gate_project_week(history(project), week, load_config(project))
    (comparison,) = [c for c in report.comparisons if c.reference == "previous-week"]
    assert comparison.verdict == "ERROR"
    code, out, _ = run(capsys, "gate", "--week", week, "--config", str(project))
    assert code == 2 and " ".join(comparison.reason.split()) in " ".join(out.split())
    return comparison.reason


def test_an_imported_line_missing_a_week_is_told_to_import_it(
    harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two imported lines, one without a result this week: MISSING, with the import to run."""
    assert import_inspect(capsys, project, inspect_log(harness_logs, "good"), "2026-W40")[0] == 0
    args = ("--model", "other")
    assert run(capsys, "import", "lm-eval", lm_folder(harness_logs, "good"), *args, "--week", "2026-W40", "--config", str(project))[0] == 0  # fmt: skip
    assert run(capsys, "import", "lm-eval", lm_folder(harness_logs, "same"), *args, "--week", "2026-W41", "--config", str(project))[0] == 0  # fmt: skip
    code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
    assert code == 2 and "MISSING: no result in 2026-W41" in out
    said = (
        "import its run (evalsentry import inspect ... --model sums --week 2026-W41, or "
        "evalsentry import pickup --week 2026-W41)"
    )
    assert said in " ".join(out.split())


def lm_copy(logs: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of the good lm-eval run: its folder, results file and samples file."""
    folder = tmp_path / "run"
    shutil.copytree(lm_folder(logs, "good"), folder)
    return folder, next(folder.rglob("results_*.json")), next(folder.rglob("samples_*.jsonl"))


def truncate_a_line(samples: Path) -> str:
    lines = samples.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    samples.write_text("\n".join(lines) + "\n")
    return "line 3"


def drop_a_doc_hash(samples: Path) -> str:
    lines = samples.read_text().splitlines()
    row = json.loads(lines[4])
    del row["doc_hash"]
    lines[4] = json.dumps(row)
    samples.write_text("\n".join(lines) + "\n")
    return "line 5: doc_hash"


def add_a_filter(samples: Path) -> str:
    lines = samples.read_text().splitlines()
    again = [json.dumps({**json.loads(line), "filter": "take_first"}) for line in lines]
    samples.write_text("\n".join(lines + again) + "\n")
    return "filter"


class TestComparable:
    """Two runs pair exactly when the model saw the same thing, scored the same way."""

    @pytest.mark.parametrize("prompt", ["same", "few-shot"])
    def test_a_document_the_task_holds_twice_counts_twice(
        self,
        harness_logs: Path,
        project: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        prompt: str,
    ) -> None:
        """A duplicate document (another doc id, the same content), as MMLU has: 41 examples
        as lm-eval counts them, its mean lm-eval's; the next week pairs occurrence by occurrence.
        Few-shot, the copy is shown other examples first (another prompt): it imports too."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        copy = {**json.loads(lines[0]), "doc_id": len(lines)}
        if prompt == "few-shot":
            copy["prompt_hash"] = "0" * 64
        samples.write_text("\n".join([*lines, json.dumps(copy)]) + "\n")
        scores = [float(json.loads(line)["acc"]) for line in [*lines, json.dumps(copy)]]
        code, out, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 0, err
        assert f"41 examples, score:acc {sum(scores) / len(scores):.4f}" in out
        predictions = history(project).predictions(
            history(project).evaluations().iloc[0]["evaluation_id"]
        )
        assert predictions is not None
        duplicated = [i for i in predictions["example_id"].tolist() if "#" in i]
        assert sorted(i.rsplit("#", 1)[1] for i in duplicated) == ["1", "2"]
        assert import_lm(capsys, project, str(folder), "2026-W41")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 0 and "PASS" in out

    def test_another_filter_is_refused_naming_it(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same run imported under one filter, then another: not a regression, an ERROR
        naming the filter; the run itself is the same (the pick-up would skip it)."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        add_a_filter(samples)
        assert import_lm(capsys, project, str(folder), "2026-W40", "--filter", "none")[0] == 0
        code, _, err = import_lm(capsys, project, str(folder), "2026-W41", "--filter", "take_first")
        assert code == 0, err
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 2 and "FAIL" not in out
        assert "not comparable: the filter changed: none -> take_first" in out
        rows = history(project).evaluations()
        ids = {json.loads(c)["import_id"] for c in rows["config_json"]}
        assert len(ids) == 1  # one run, two filters

    def test_samples_in_another_order_pair(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A reordered data file (or a run gathered from several GPUs): every document is the
        same, lm-eval's ordered task hash is not; the weeks pair and pass."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        folder, results, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        shuffled = [
            json.dumps({**json.loads(line), "doc_id": position})
            for position, line in enumerate(reversed(lines))
        ]
        samples.write_text("\n".join(shuffled) + "\n")
        document = json.loads(results.read_text())
        document["task_hashes"] = dict.fromkeys(document["task_hashes"], "0" * 64)
        results.write_text(json.dumps(document))
        assert import_lm(capsys, project, str(folder), "2026-W41")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 0 and "PASS" in out and "not comparable" not in out

    def test_a_limited_run_names_what_it_left_out(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The first 30 documents (lm_eval --limit 30) against the full 40: counted, the first
        left out named by doc id and question."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        samples.write_text("\n".join(lines[:30]) + "\n")
        assert import_lm(capsys, project, str(folder), "2026-W41")[0] == 0
        reason = gate_reason(capsys, project, "2026-W41")
        first = json.loads(lines[30])
        assert reason.startswith(
            "not comparable: 10 of the reference's 40 examples are not in this run ("
        )
        assert f"doc {first['doc_id']} {first['doc']['question']!r}" in reason
        assert reason.endswith("(a --limit, or another split?); 30 in both")

    def test_an_edited_document_is_named(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One document's question edited (its doc_hash and prompt changed with it)."""
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        row = json.loads(lines[5])
        row["doc"]["question"] = "What is 1 plus 1?"
        row["doc_hash"], row["prompt_hash"] = "e" * 64, "f" * 64
        lines[5] = json.dumps(row)
        samples.write_text("\n".join(lines) + "\n")
        assert import_lm(capsys, project, str(folder), "2026-W41")[0] == 0
        reason = gate_reason(capsys, project, "2026-W41")
        assert reason == (
            f"not comparable: 1 of 40 documents edited (doc {row['doc_id']} 'What is 1 plus 1?'); "
            "39 in both"
        )

    def test_a_renamed_task_is_named(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same documents under another task name, imported as one evalset: both named."""
        args = ("--evalset", "arith")
        assert (
            import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40", *args)[0] == 0
        )
        folder, results, samples = lm_copy(harness_logs, tmp_path)
        text = results.read_text().replace('"evalsentry_arith"', '"arith_v2"')
        results.write_text(text)
        samples.rename(samples.with_name(samples.name.replace("evalsentry_arith", "arith_v2")))
        assert import_lm(capsys, project, str(folder), "2026-W41", *args)[0] == 0
        reason = gate_reason(capsys, project, "2026-W41")
        assert reason == "not comparable: the task changed: evalsentry_arith -> arith_v2"

    def test_only_unchanged_examples_are_gated_where_the_team_says_so(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """gate.only_unchanged: a limited run pairs on the 30 examples both hold, and its PASS
        reads WARN saying how many were left out; a degraded limited run still FAILs, saying
        so too; a changed filter is still refused (no subset mends how a run scored)."""
        project.write_text(project.read_text() + f"gate:\n  only_unchanged: [{LM_TASK}]\n")
        assert import_lm(capsys, project, lm_folder(harness_logs, "good"), "2026-W40")[0] == 0
        for week, version in (("2026-W41", "same"), ("2026-W42", "worse")):
            folder = tmp_path / version
            shutil.copytree(lm_folder(harness_logs, version), folder)
            samples = next(folder.rglob("samples_*.jsonl"))
            samples.write_text("\n".join(samples.read_text().splitlines()[:30]) + "\n")
            assert import_lm(capsys, project, str(folder), week)[0] == 0
        said = (
            "gated on the 30 of the reference's 40 examples both runs hold unchanged, 10 left out: 10 "
            "not in this run (gate.only_unchanged)"
        )
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 0 and "WARN" in out and said in " ".join(out.split())
        assert "PASS" not in out.split("\n")[0]
        code, out, _ = run(capsys, "gate", "--week", "2026-W42", "--config", str(project))
        assert (
            code == 1 and "FAIL" in out and "gated on the 30 of the reference's 40 examples" in out
        )
        edited = tmp_path / "edited"
        shutil.copytree(lm_folder(harness_logs, "good"), edited)
        samples = next(edited.rglob("samples_*.jsonl"))
        lines = samples.read_text().splitlines()
        lines[5] = json.dumps({**json.loads(lines[5]), "doc_hash": "e" * 64, "prompt_hash": "f" * 64})  # fmt: skip
        samples.write_text("\n".join(lines) + "\n")
        assert import_lm(capsys, project, str(edited), "2026-W43")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W43", "--config", str(project))
        said = "gated on the 29 of the reference's 30 examples both runs hold unchanged, 11 left out: 1 edited, 10 new (gate.only_unchanged)"  # fmt: skip
        assert code == 0 and "WARN" in out and said in " ".join(out.split())
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        add_a_filter(samples)
        assert import_lm(capsys, project, str(folder), "2026-W44", "--filter", "take_first")[0] == 0
        reason = gate_reason(capsys, project, "2026-W44")
        assert reason == "not comparable: the filter changed: none -> take_first"

    def test_fewer_inspect_epochs_are_refused_naming_them(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same Inspect task run with one epoch instead of two: an ERROR naming epochs."""
        from inspect_ai.log import read_eval_log, write_eval_log

        assert (
            import_inspect(capsys, project, inspect_log(harness_logs, "good"), "2026-W40")[0] == 0
        )
        log = read_eval_log(inspect_log(harness_logs, "same"))
        log.eval.config.epochs = 1
        assert log.samples is not None
        log.samples = [sample for sample in log.samples if sample.epoch == 1]
        once = tmp_path / "once.eval"
        write_eval_log(log, str(once))
        assert import_inspect(capsys, project, str(once), "2026-W41")[0] == 0
        code, out, _ = run(capsys, "gate", "--week", "2026-W41", "--config", str(project))
        assert code == 2 and "not comparable: the epochs changed: 2 -> 1" in out


def test_a_reference_imported_before_scoring_was_recorded_is_refused_saying_so() -> None:
    """A reference row of an earlier evalsentry holds no scoring: refused, with the fix."""
    import numpy as np

    from evalsentry.gate.content import content_change

    ids = np.array(["a", "b"], dtype=object)
    same = {"example_id": ids, "prompt_hash": np.array(["p", "q"], dtype=object)}
    scoring = np.array(['{"filter": "none"}'] * 2, dtype=object)
    reason = content_change(same, {**same, "scoring": scoring})
    assert reason is not None and "imported by an earlier evalsentry" in reason
    assert "import its run again" in reason
    assert content_change({**same, "scoring": scoring}, {**same, "scoring": scoring}) is None
    mixed = np.array(['{"filter": "none"}', '{"filter": "x"}'], dtype=object)  # two runs' rows
    reason = content_change({**same, "scoring": scoring}, {**same, "scoring": mixed})
    assert reason is not None and reason.startswith("not comparable: the scoring settings")


class TestBadInput:
    @pytest.mark.parametrize(
        ("damage", "words"),
        [
            (truncate_a_line, "not valid JSON"),
            (drop_a_doc_hash, "missing"),
            (add_a_filter, "2 filters (none, take_first); choose one with --filter"),
        ],
    )
    def test_a_damaged_samples_file_is_one_line_exit_2_nothing_recorded(
        self,
        harness_logs: Path,
        project: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        damage: object,
        words: str,
    ) -> None:
        """Truncated JSON, a missing doc_hash, two filters unchosen: the file, field and fix."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        field = damage(samples)  # type: ignore[operator]
        code, _, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 2
        assert err.count("\n") == 1 and f"{samples}: {field}: " in err and words in err
        assert "nothing was recorded" in err
        assert history(project).evaluations().empty

    def test_a_git_hash_is_recorded_without_its_newline(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """lm-eval's git_hash as `git rev-parse` printed it, newline and all: recorded bare."""
        folder, results, _ = lm_copy(harness_logs, tmp_path)
        document = json.loads(results.read_text())
        document["git_hash"] = "4f2c1e9\n"
        results.write_text(json.dumps(document))
        assert import_lm(capsys, project, str(folder), "2026-W40")[0] == 0
        row = history(project).evaluations().iloc[0]
        assert row["git_sha"] == "4f2c1e9"
        assert json.loads(row["config_json"])["git_hash"] == "4f2c1e9"

    def test_a_sample_logged_twice_is_refused_not_averaged(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every line doubled with another score: refused naming the doc id, nothing recorded."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        doubled = [json.dumps({**json.loads(line), "acc": 0.0}) for line in lines]
        samples.write_text("\n".join(lines + doubled) + "\n")
        code, _, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 2 and err.count("\n") == 1
        assert f"{samples}: line {len(lines) + 1}: doc_id: document 0 is also on line 1" in err
        assert history(project).evaluations().empty

    def test_an_inspect_sample_logged_twice_is_refused_not_averaged(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A sample and epoch logged twice with another score: one line naming it, nothing kept."""
        from inspect_ai.log import read_eval_log, write_eval_log

        log = read_eval_log(inspect_log(harness_logs, "good"))
        assert log.samples is not None
        twin = log.samples[0].model_copy(deep=True)
        twin.scores["match"].value = "I"  # type: ignore[index]
        log.samples.append(twin)
        doubled = tmp_path / "doubled.json"
        write_eval_log(log, str(doubled))
        code, _, err = import_inspect(capsys, project, str(doubled), "2026-W40")
        assert code == 2 and err.count("\n") == 1, err
        first = log.samples[0]
        assert f"samples[{first.id} epoch {first.epoch}]: logged 2 times" in err
        assert history(project).evaluations().empty

    @pytest.mark.parametrize("value", [1e300, -0.5, 2])
    def test_a_score_outside_its_range_is_refused(
        self,
        harness_logs: Path,
        project: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        value: float,
    ) -> None:
        """acc lies in [0, 1]: a forged 1e300 would pass any week; refused naming line and field."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        lines = samples.read_text().splitlines()
        lines[3] = json.dumps({**json.loads(lines[3]), "acc": value})
        samples.write_text("\n".join(lines) + "\n")
        code, _, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 2 and f"line 4: acc: {value!r} is outside [0, 1], where acc lies" in err
        assert history(project).evaluations().empty

    def test_a_metric_name_that_could_be_markup_is_refused(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A metric named like a Markdown link (or a mention) would reach the PR comment live:
        refused at import, naming it; nothing recorded."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        name = "acc](https://evil.example) @team"
        lines = []
        for line in samples.read_text().splitlines():
            row = json.loads(line)
            row[name] = row.pop("acc")
            row["metrics"] = [name if m == "acc" else m for m in row["metrics"]]
            lines.append(json.dumps(row))
        samples.write_text("\n".join(lines) + "\n")
        code, _, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 2 and err.count("\n") == 1
        assert f"scores.{name!r}: not a metric name evalsentry shows as it is" in err
        assert history(project).evaluations().empty

    def test_two_filters_import_once_one_is_chosen(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--filter picks the rows of one filter: 40 examples, not 80."""
        folder, _, samples = lm_copy(harness_logs, tmp_path)
        add_a_filter(samples)
        code, out, _ = import_lm(capsys, project, str(folder), "2026-W40", "--filter", "take_first")
        assert code == 0 and "40 examples" in out

    def test_an_lm_eval_log_of_another_format_version_is_refused(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Results written by lm-eval 0.3 are refused naming lm_eval_version."""
        folder, results, _ = lm_copy(harness_logs, tmp_path)
        results.write_text(results.read_text().replace('"0.4.13"', '"0.3.0"'))
        code, _, err = import_lm(capsys, project, str(folder), "2026-W40")
        assert code == 2 and err.count("\n") == 1
        assert f"{results}: lm_eval_version: written by lm-evaluation-harness 0.3.0" in err
        assert history(project).evaluations().empty

    def test_an_inspect_log_of_another_format_version_is_refused(
        self, harness_logs: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A real Inspect log rewritten as JSON with format version 3 is refused naming version."""
        from inspect_ai.log import read_eval_log, write_eval_log

        log = read_eval_log(inspect_log(harness_logs, "good"))
        path = tmp_path / "log.json"
        write_eval_log(log, str(path), format="json")
        document = json.loads(path.read_text())
        assert document["version"] == 2
        path.write_text(json.dumps({**document, "version": 3}))
        code, _, err = import_inspect(capsys, project, str(path), "2026-W40")
        assert code == 2 and err.count("\n") == 1
        assert f"{path}: version: log format version 3" in err
        assert history(project).evaluations().empty


class TestTheHarnessesOwnNumbers:
    """The gated score is the score the harness reported, its reducers honoured."""

    def test_lm_evals_reported_accuracy(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """score:acc of a run right on 22 of 40 is lm-eval's own acc,none."""
        folder = lm_folder(harness_logs, "worse")
        results = json.loads(next(Path(folder).rglob("results_*.json")).read_text())
        reported = results["results"]["evalsentry_arith"]["acc,none"]
        assert import_lm(capsys, project, folder, "2026-W40")[0] == 0
        (value,) = history(project).metrics(history(project).evaluations()["evaluation_id"])[
            "value"
        ]
        assert value == pytest.approx(reported, abs=1e-12)

    def test_an_inspect_reducer_is_honoured_and_recorded(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two epochs reduced by at_least_1: the gated score is Inspect's accuracy (right in
        either epoch), not the plain mean of the epochs; the reducer is in the lineage."""
        from inspect_ai.log import read_eval_log

        path = inspect_log(harness_logs, "reduced")
        log = read_eval_log(path)
        assert log.results is not None and log.samples is not None
        reported = log.results.scores[0].metrics["accuracy"].value
        plain = sum(s.scores["match"].value == "C" for s in log.samples if s.scores) / len(
            log.samples
        )
        assert abs(reported - plain) > 0.1  # the reducer matters on this run
        code, out, err = import_inspect(capsys, project, path, "2026-W40")
        assert code == 0, err
        assert f"30 examples, score:match {reported:.4f}" in out
        (value,) = history(project).metrics(history(project).evaluations()["evaluation_id"])[
            "value"
        ]
        assert value == pytest.approx(reported, abs=1e-12)
        lineage = json.loads(history(project).evaluations().iloc[0]["config_json"])
        assert lineage["scoring"]["epochs_reducer"] == ["at_least_1"]

    def test_a_sample_the_reduction_misses_is_refused(
        self, harness_logs: Path, project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A reduction must cover every sample the log holds: one missing is refused, never
        averaged over its epochs beside the others' reduced scores."""
        from inspect_ai.log import read_eval_log, write_eval_log

        log = read_eval_log(inspect_log(harness_logs, "reduced"))
        assert log.reductions
        log.reductions[0].samples = log.reductions[0].samples[1:]
        damaged = tmp_path / "damaged.json"
        write_eval_log(log, str(damaged), format="json")
        code, _, err = import_inspect(capsys, project, str(damaged), "2026-W40")
        assert code == 2 and "no reduced score for 1 sample(s)" in err, err


def test_in_a_task_group_an_edit_is_matched_within_its_subtask() -> None:
    """Doc 6 leaving subtask a and doc 6 joining subtask b is no edit: one gone, one new."""
    import numpy as np

    from evalsentry.gate.content import content_change

    def columns(rows: list[tuple[str, str, str]]) -> dict[str, np.ndarray]:
        ids, tasks, docs = zip(*rows, strict=True)
        return {
            "example_id": np.array(ids, dtype=object), "slice:task": np.array(tasks, dtype=object),
            "doc_id": np.array(docs, dtype=object), "prompt_hash": np.array(ids, dtype=object),
        }  # fmt: skip

    reference = columns([("a/x", "a", "5"), ("a/y", "a", "6")])
    current = columns([("a/x", "a", "5"), ("b/z", "b", "6")])
    reason = content_change(reference, current)
    assert reason is not None and "edited" not in reason
    assert "1 of the reference's 2 examples are not in this run (a doc 6)" in reason
    assert "1 is new (b doc 6)" in reason
    edited = columns([("a/x", "a", "5"), ("a/w", "a", "6")])
    assert content_change(reference, edited) == (
        "not comparable: 1 of 2 documents edited (a doc 6); 1 in both"
    )
