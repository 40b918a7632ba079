"""Frozen evalsets: freeze, identity, seal, verify, load, validate, and every kind of bad input."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from evalsentry.errors import ConfigError, EvalsetError, EvalsetInvalid, EvalsetTampered
from evalsentry.evalsets.check import check_evalset, validate_evalset
from evalsentry.evalsets.evalset import EvalsetSpec, InputsSpec, load_evalset, read_spec
from evalsentry.evalsets.freeze import freeze_evalset, seal_evalset
from evalsentry.evalsets.identity import (
    RESULT_FIELDS,
    EvalsetFieldChanged,
    field_digests,
    identity_gaps,
)

ROWS = 60
# Recorded in every history that ever evaluated the shipped digits evalset.
DIGITS_SHA = "aefea14f82ebdf0a51a1624d98f994072b47f19d5de8bdcd19107eb3c1369f27"


def tensor_table(rows: int = ROWS, seed: int = 0) -> pa.Table:
    """Rows of a 2x3 tensor input, 3 classes, a slice column, string ids."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 1, rows * 6).astype(np.float32)
    return pa.table(
        {
            "uid": [f"ex-{i}" for i in range(rows)],
            "x": pa.FixedSizeListArray.from_arrays(pa.array(values), 6),
            "label": np.arange(rows) % 3,
            "group": ["a" if i % 2 else "b" for i in range(rows)],
        }
    )


def freeze_tensor(dest: Path, table: pa.Table | None = None, **kw: object) -> Path:
    """Freeze a tensor-input classification evalset into ``dest``."""
    freeze_evalset(
        table if table is not None else tensor_table(),
        dest,
        name=dest.name,
        task="classification",
        target="label",
        inputs=InputsSpec(column="x", shape=[2, 3]),
        id_column="uid",
        slices=["group"],
        **kw,  # type: ignore[arg-type]
    )
    return dest


def repin(folder: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` with its identity and field hashes recomputed, as a forger would."""
    spec = EvalsetSpec.model_validate(manifest)
    manifest["evalset_sha256"] = spec.identity()
    if spec.field_sha256 is not None:
        manifest["field_sha256"] = field_digests(spec.result_fields())
    (folder / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def rewrite(folder: Path, table: pa.Table) -> None:
    """Replace the data and re-pin the manifest, as someone bypassing freeze would."""
    path = folder / "data" / "part-000.parquet"
    pq.write_table(table, path, compression="zstd")
    from evalsentry.storage import sha256_file

    manifest = yaml.safe_load((folder / "evalset.yaml").read_text())
    sha, size = sha256_file(path)
    manifest["files"] = [{"path": "data/part-000.parquet", "sha256": sha, "size": size}]
    repin(folder, manifest)


def edit(folder: Path, **fields: object) -> None:
    """Change manifest fields in place, without re-pinning anything."""
    manifest = yaml.safe_load((folder / "evalset.yaml").read_text())
    manifest.update(fields)
    (folder / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def v1_identity(manifest: dict[str, Any]) -> str:
    """The identity hash exactly as evalsentry computed it before identity version 2."""
    canonical = {
        "files": sorted([f["path"], f["sha256"]] for f in manifest["files"]),
        "id_column": manifest["id_column"],
        "inputs": {k: v for k, v in manifest["inputs"].items() if v is not None},
        "target": manifest["target"],
        "task": manifest["task"],
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def as_v1(folder: Path) -> str:
    """Turn a fresh freeze into an evalset frozen before identity version 2; its old sha."""
    manifest = yaml.safe_load((folder / "evalset.yaml").read_text())
    del manifest["identity_version"], manifest["field_sha256"]
    manifest["evalset_sha256"] = v1_identity(manifest)
    (folder / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return str(manifest["evalset_sha256"])


@pytest.fixture
def frozen(tmp_path: Path) -> Path:
    """A freshly frozen tensor evalset."""
    return freeze_tensor(tmp_path / "sets" / "toy")


class TestFreeze:
    def test_writes_manifest_suite_and_zstd_parquet(self, frozen: Path) -> None:
        """The folder holds the data, a manifest with hashes, and a GX suite."""
        spec = read_spec(frozen)
        assert (spec.num_rows, spec.classes, spec.slices) == (ROWS, [0, 1, 2], ["group"])
        assert spec.schema_["x"] == "fixed_size_list<element: float>[6]"
        assert spec.evalset_sha256 == spec.identity()
        meta = pq.ParquetFile(frozen / spec.files[0].path).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"
        suite = (frozen / "expectations.json").read_text()
        for expectation in (
            "expect_table_row_count_to_equal",
            "expect_column_values_to_be_unique",
            "expect_column_distinct_values_to_equal_set",
            "x__nonfinite",
        ):
            assert expectation in suite

    def test_refuses_to_overwrite_a_frozen_evalset(self, frozen: Path) -> None:
        """Frozen data is never overwritten; the error says how to make a new version."""
        before = read_spec(frozen).evalset_sha256
        with pytest.raises(EvalsetError, match="--name toy-v2 --version 2"):
            freeze_tensor(frozen, tensor_table(seed=1))
        assert read_spec(frozen).evalset_sha256 == before

    def test_new_version_is_a_new_folder_and_the_old_stays_usable(self, frozen: Path) -> None:
        """Version 2 lives beside version 1, with another identity."""
        v2 = freeze_tensor(frozen.parent / "toy-v2", tensor_table(seed=1), version=2)
        assert read_spec(v2).evalset_sha256 != read_spec(frozen).evalset_sha256
        assert len(load_evalset(frozen)) == ROWS

    def test_missing_id_gets_a_deterministic_one(self, tmp_path: Path) -> None:
        """Without an id column, the same data gets the same ids, and the same identity."""
        table = tensor_table().drop_columns(["uid"])
        specs = [
            freeze_evalset(
                table,
                tmp_path / n / "toy",
                name="toy",
                task="classification",
                target="label",
                inputs=InputsSpec(column="x", shape=[6]),
            )
            for n in ("a", "b")
        ]
        assert specs[0].id_column == "id"
        assert specs[0].evalset_sha256 == specs[1].evalset_sha256
        assert load_evalset(tmp_path / "a" / "toy").ids[0] == "toy-000000"

    def test_feature_columns_and_regression(self, tmp_path: Path) -> None:
        """Numeric feature columns and a regression target freeze and load as a 2-D tensor."""
        frame = pa.table({"a": [1.0, 2.0, 3.0], "b": [0, 1, 2], "y": [0.5, 1.5, 2.5]})
        spec = freeze_evalset(
            frame,
            tmp_path / "reg",
            name="reg",
            task="regression",
            target="y",
            inputs=InputsSpec(columns=["a", "b"]),
        )
        evalset = load_evalset(tmp_path / "reg")
        assert spec.classes is None
        assert evalset.inputs.shape == (3, 2) and evalset.tensors()[1].dtype == torch.float32

    def test_wrong_shape_is_refused_at_freeze(self, tmp_path: Path) -> None:
        """A shape that does not match the vectors names the offending row."""
        with pytest.raises(EvalsetError, match=r"shape \[2, 2\] needs 4 values per row, row 0"):
            freeze_evalset(
                tensor_table(),
                tmp_path / "bad",
                name="bad",
                task="classification",
                target="label",
                inputs=InputsSpec(column="x", shape=[2, 2]),
            )
        assert not (tmp_path / "bad").exists()

    def test_missing_input_column_suggests_a_name(self, tmp_path: Path) -> None:
        """A misspelt inputs column is refused with a did-you-mean."""
        with pytest.raises(EvalsetError, match="Did you mean 'label'"):
            freeze_evalset(
                tensor_table(),
                tmp_path / "bad",
                name="bad",
                task="classification",
                target="label",
                inputs=InputsSpec(columns=["labl"]),
            )

    def test_duplicate_ids_are_refused(self, tmp_path: Path) -> None:
        """Ids must identify examples: duplicates are refused at freeze."""
        table = tensor_table().set_column(0, "uid", pa.array(["same"] * ROWS))
        with pytest.raises(EvalsetError, match="unique"):
            freeze_tensor(tmp_path / "dup", table)

    @pytest.mark.parametrize(
        ("labels", "match"),
        [
            ([0.0, 1.0, 2.0] * (ROWS // 3), r"'label' is double; .* must be integers or strings"),
            ([True, False] * (ROWS // 2), r"'label' is bool"),
        ],
    )
    def test_classification_labels_must_be_integers_or_strings(
        self, tmp_path: Path, labels: list[object], match: str
    ) -> None:
        """Float or boolean class labels are refused at freeze with the fix, nothing written."""
        table = tensor_table().set_column(2, "label", pa.array(labels))
        with pytest.raises(EvalsetError, match=match):
            freeze_tensor(tmp_path / "bad", table)
        assert not (tmp_path / "bad").exists()

    @pytest.mark.parametrize(
        ("column", "broken", "match"),
        [
            ("group", lambda t: [None, *t.column("group").to_pylist()[1:]], r"'group' has null"),
            ("x", lambda t: [None, *t.column("x").to_pylist()[1:]], r"'x' is null in 1 row"),
            (
                "x",
                lambda t: [[float("nan")] * 6, *t.column("x").to_pylist()[1:]],
                r"'x' has NaN or infinite values in 1 row\(s\), first at row 0",
            ),
        ],
    )
    def test_values_the_suite_would_refuse_are_refused_at_freeze(
        self, tmp_path: Path, column: str, broken: Any, match: str
    ) -> None:
        """A null slice value, a null or NaN input: refused at freeze, not at the first week."""
        table = tensor_table()
        index = table.column_names.index(column)
        values = pa.array(broken(table), type=table.schema.field(column).type)
        with pytest.raises(EvalsetError, match=match):
            freeze_tensor(tmp_path / "bad", table.set_column(index, column, values))
        assert not (tmp_path / "bad").exists()

    def test_infinite_regression_target_is_refused(self, tmp_path: Path) -> None:
        """An inf regression target is refused naming the column and the first row."""
        frame = pa.table({"a": [1.0, 2.0, 3.0], "y": [0.5, float("inf"), 2.5]})
        with pytest.raises(EvalsetError, match=r"'y' has 1 infinite label\(s\), first at row 1"):
            freeze_evalset(
                frame,
                tmp_path / "reg",
                name="reg",
                task="regression",
                target="y",
                inputs=InputsSpec(columns=["a"]),
            )

    @pytest.mark.parametrize(
        ("classes", "match"),
        [
            ([0, 1], r"has label\(s\) 2 not among the classes 0, 1"),
            ([0, 1, 2, 3], r"classes 3 have no example in target column 'label'"),
            ([0, 1, 1, 2], "1 listed more than once; each class may appear once"),
        ],
    )
    def test_given_classes_must_be_the_labels(
        self, tmp_path: Path, classes: list[int], match: str
    ) -> None:
        """Classes given at freeze must be the label set, once each, or the suite would fail."""
        with pytest.raises(EvalsetError, match=match):
            freeze_tensor(tmp_path / "bad", classes=classes)

    def test_given_class_order_is_kept(self, tmp_path: Path) -> None:
        """Classes given in a chosen order are frozen in that order (it maps outputs to labels)."""
        folder = freeze_tensor(tmp_path / "ordered", classes=[2, 0, 1])
        assert read_spec(folder).classes == [2, 0, 1]
        assert load_evalset(folder).targets[:3].tolist() == [1, 2, 0]


class TestIdentity:
    def test_freeze_pins_every_result_changing_field(self, frozen: Path) -> None:
        """A new freeze writes identity version 2 with one hash per result-changing field."""
        spec = read_spec(frozen)
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        assert spec.identity_version == 2 and manifest["identity_version"] == 2
        assert list(spec.field_sha256 or {}) == list(RESULT_FIELDS)
        assert spec.evalset_sha256 == spec.identity() != v1_identity(manifest)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("classes", [1, 0, 2]),
            ("metrics", ["top5_accuracy"]),
            ("slices", []),
            ("task", "regression"),
            ("id_column", "group"),
        ],
    )
    def test_an_edited_field_is_named_at_load_and_validation(
        self, frozen: Path, field: str, value: object
    ) -> None:
        """Editing any result-changing field of a version-2 manifest fails, naming that field."""
        edit(frozen, **{field: value})
        for use in (load_evalset, check_evalset):
            with pytest.raises(EvalsetFieldChanged) as err:
                use(frozen)
            assert err.value.fields == [field]
            assert f"evalset.yaml: {field}: changed since freeze" in str(err.value)

    def test_two_versions_differing_only_in_class_order_have_different_identities(
        self, tmp_path: Path
    ) -> None:
        """The gate compares by identity: a different class order is another evalset."""
        a = read_spec(freeze_tensor(tmp_path / "a" / "toy", classes=[0, 1, 2]))
        b = read_spec(freeze_tensor(tmp_path / "b" / "toy", classes=[1, 0, 2]))
        assert a.files == b.files and a.evalset_sha256 != b.evalset_sha256

    def test_a_downgraded_identity_version_is_caught(self, frozen: Path) -> None:
        """Removing identity_version (reading as the older, narrower scheme) fails the identity."""
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        del manifest["identity_version"]
        (frozen / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        with pytest.raises(EvalsetTampered, match=r"evalset\.yaml: evalset file changed"):
            load_evalset(frozen)

    def test_an_edited_field_hash_is_caught(self, frozen: Path) -> None:
        """A field hash edited to match an edited field still fails the identity hash."""
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        manifest["classes"] = [1, 0, 2]
        fields = EvalsetSpec.model_validate(manifest).result_fields()
        manifest["field_sha256"]["classes"] = field_digests(fields)["classes"]
        (frozen / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        with pytest.raises(EvalsetTampered, match=r"evalset\.yaml"):
            load_evalset(frozen)

    def test_edited_num_rows_is_caught_at_load(self, frozen: Path) -> None:
        """A num_rows that no longer matches the data is refused, naming the field."""
        edit(frozen, num_rows=ROWS - 1)
        with pytest.raises(EvalsetError, match=rf"num_rows: {ROWS - 1}, but the data holds {ROWS}"):
            load_evalset(frozen)


class TestVersion1:
    def test_an_old_manifest_verifies_with_its_old_sha(self, frozen: Path) -> None:
        """A manifest frozen before identity version 2 loads, validates and keeps its sha."""
        old_sha = as_v1(frozen)
        spec = read_spec(frozen)
        assert spec.identity_version == 1 and spec.identity() == old_sha
        assert load_evalset(frozen).sha256 == old_sha
        assert check_evalset(frozen).success
        assert identity_gaps(spec) == ["slices"]

    def test_swapped_classes_are_caught_against_the_suite(self, frozen: Path) -> None:
        """Version 1 does not hash classes; their frozen order in the suite still catches a swap."""
        as_v1(frozen)
        edit(frozen, classes=[1, 0, 2])
        with pytest.raises(
            EvalsetFieldChanged, match=r"classes: \[1, 0, 2\] differs from \[0, 1, 2\]"
        ):
            load_evalset(frozen)

    def test_an_unpinned_metrics_list_is_refused(self, frozen: Path) -> None:
        """A metrics list nothing pins (version 1, not sealed) is refused, pointing at seal."""
        as_v1(frozen)
        edit(frozen, metrics=["top5_accuracy"])
        with pytest.raises(EvalsetFieldChanged, match=r"metrics: .*evalset seal toy"):
            check_evalset(frozen)

    def test_seal_pins_the_fields_and_keeps_the_sha(self, frozen: Path) -> None:
        """Sealing adds field hashes, keeps evalset_sha256, and then catches a removed slice."""
        old_sha = as_v1(frozen)
        before = (frozen / "evalset.yaml").read_text()
        spec = seal_evalset(frozen)
        assert spec.evalset_sha256 == old_sha and spec.identity_version == 1
        assert (frozen / "evalset.yaml").read_text().startswith(before)
        assert identity_gaps(spec) == [] and load_evalset(frozen).sha256 == old_sha
        edit(frozen, slices=[])
        with pytest.raises(EvalsetFieldChanged, match="slices: changed since freeze"):
            load_evalset(frozen)

    def test_seal_vouches_for_a_metrics_list(self, frozen: Path) -> None:
        """A version-1 metrics list is usable once sealed, and pinned from then on."""
        as_v1(frozen)
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        manifest["metrics"] = ["accuracy"]
        (frozen / "evalset.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        seal_evalset(frozen)
        assert load_evalset(frozen).spec.metrics == ["accuracy"]
        edit(frozen, metrics=["top5_accuracy"])
        with pytest.raises(EvalsetFieldChanged, match="metrics: changed since freeze"):
            load_evalset(frozen)

    def test_seal_refuses_what_it_can_prove_wrong_or_needs_no_seal(self, frozen: Path) -> None:
        """Seal refuses a version-2 evalset, and a version-1 one whose classes were swapped."""
        with pytest.raises(EvalsetError, match="pinned already"):
            seal_evalset(frozen)
        as_v1(frozen)
        edit(frozen, classes=[1, 0, 2])
        with pytest.raises(EvalsetFieldChanged, match="classes"):
            seal_evalset(frozen)
        assert "field_sha256" not in (frozen / "evalset.yaml").read_text()


class TestVerifyAndLoad:
    def test_load_gives_tensors_ids_and_slices(self, frozen: Path) -> None:
        """Inputs come back as one array of the declared shape (float32 tensors for the model) with targets, ids, slices."""
        evalset = load_evalset(frozen)
        table = tensor_table()
        assert evalset.inputs.shape == (ROWS, 2, 3) and evalset.tensors()[0].dtype == torch.float32
        expected = np.asarray(table.column("x").combine_chunks().flatten()).reshape(ROWS, 2, 3)
        assert np.array_equal(evalset.inputs, expected)
        assert evalset.targets.tolist() == (np.arange(ROWS) % 3).tolist()
        assert evalset.ids[:2].tolist() == ["ex-0", "ex-1"]
        assert set(evalset.slices["group"]) == {"a", "b"}

    def test_load_by_name_under_a_folder(self, frozen: Path) -> None:
        """Names resolve under the evalsets folder; unknown names suggest a known one."""
        assert load_evalset("toy", evalsets_dir=frozen.parent).spec.name == "toy"
        with pytest.raises(EvalsetError, match="Did you mean 'toy'"):
            load_evalset("toi", evalsets_dir=frozen.parent)

    def test_one_changed_byte_is_caught_naming_file_and_hashes(self, frozen: Path) -> None:
        """Changing one byte of a data file fails verification with both hashes."""
        data = frozen / "data" / "part-000.parquet"
        expected = read_spec(frozen).files[0].sha256
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        data.write_bytes(bytes(raw))
        with pytest.raises(EvalsetTampered) as err:
            load_evalset(frozen)
        assert err.value.path.endswith("part-000.parquet")
        assert err.value.expected == expected and err.value.actual != expected

    def test_missing_data_file(self, frozen: Path) -> None:
        """A deleted data file is reported as missing."""
        (frozen / "data" / "part-000.parquet").unlink()
        with pytest.raises(EvalsetTampered, match="file missing"):
            load_evalset(frozen)

    def test_unexpected_extra_file(self, frozen: Path) -> None:
        """A file slipped into the data folder is reported."""
        shutil.copy(frozen / "data" / "part-000.parquet", frozen / "data" / "part-001.parquet")
        with pytest.raises(EvalsetTampered, match="unexpected extra file"):
            load_evalset(frozen)

    def test_malformed_manifest_names_the_field(self, frozen: Path) -> None:
        """A broken evalset.yaml names the file and the field."""
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        manifest["task"] = "ranking"
        (frozen / "evalset.yaml").write_text(yaml.safe_dump(manifest))
        with pytest.raises(ConfigError, match=r"evalset\.yaml: task"):
            load_evalset(frozen)

    def test_edited_identity_fields_are_caught(self, frozen: Path) -> None:
        """Editing a result-changing field (the target) without re-freezing is caught."""
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        manifest["target"] = "group"
        (frozen / "evalset.yaml").write_text(yaml.safe_dump(manifest))
        with pytest.raises(EvalsetTampered, match=r"evalset\.yaml"):
            load_evalset(frozen)

    def test_inputs_spec_not_matching_the_data_at_load(self, frozen: Path) -> None:
        """A manifest whose shape no longer fits the stored vectors is refused at load."""
        manifest = yaml.safe_load((frozen / "evalset.yaml").read_text())
        manifest["inputs"]["shape"] = [3, 3]
        repin(frozen, manifest)
        with pytest.raises(EvalsetError, match=r"needs fixed_size_list<float32>\[9\]"):
            load_evalset(frozen)

    def test_verification_can_be_skipped_only_explicitly(self, frozen: Path) -> None:
        """verify=False (benchmarks only) skips the file checks that verify=True makes."""
        (frozen / "data" / "stray.bin").write_bytes(b"x")
        with pytest.raises(EvalsetTampered):
            load_evalset(frozen)
        assert len(load_evalset(frozen, verify=False).ids) == ROWS


class TestHashCache:
    def test_second_verification_does_not_rehash(
        self, frozen: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Verifying the same unchanged evalset twice hashes its files once."""
        import evalsentry.evalsets.evalset as module

        calls: list[str] = []
        real = module.sha256_file
        monkeypatch.setattr(
            module, "sha256_file", lambda p, fs=None: calls.append(str(p)) or real(p)
        )
        module._HASH_CACHE.clear()
        load_evalset(frozen)
        load_evalset(frozen)
        assert len(calls) == 1

    def test_cache_is_dropped_when_the_file_changes(self, frozen: Path) -> None:
        """A change after a cached verification is still caught."""
        load_evalset(frozen)
        data = frozen / "data" / "part-000.parquet"
        raw = bytearray(data.read_bytes())
        raw[100] ^= 0xFF
        data.write_bytes(bytes(raw))
        with pytest.raises(EvalsetTampered):
            load_evalset(frozen)


class TestValidation:
    def test_clean_evalset_passes(self, frozen: Path) -> None:
        """Freshly frozen data passes its own suite."""
        summary = validate_evalset(frozen)
        assert summary.success and summary.failed == 0 and summary.evaluated > 10

    def test_label_outside_the_classes(self, frozen: Path) -> None:
        """A label outside the class set fails the label expectations, listing the value."""
        table = tensor_table()
        labels = table.column("label").to_numpy().copy()
        labels[5] = 7
        rewrite(frozen, table.set_column(2, "label", pa.array(labels)))
        summary = validate_evalset(frozen)
        failed = {(o.expectation, o.column) for o in summary.failures}
        assert ("expect_column_values_to_be_in_set", "label") in failed
        in_set = next(
            o for o in summary.failures if o.expectation == "expect_column_values_to_be_in_set"
        )
        assert in_set.unexpected_count == 1 and in_set.unexpected_examples == [7]
        with pytest.raises(EvalsetInvalid, match="expect_column_values_to_be_in_set"):
            check_evalset(frozen)

    def test_duplicated_id(self, frozen: Path) -> None:
        """A duplicated id fails the uniqueness expectation."""
        table = tensor_table()
        ids = table.column("uid").to_pylist()
        ids[1] = ids[0]
        rewrite(frozen, table.set_column(0, "uid", pa.array(ids)))
        failed = {(o.expectation, o.column) for o in validate_evalset(frozen).failures}
        assert ("expect_column_values_to_be_unique", "uid") in failed

    def test_nan_in_the_tensor(self, frozen: Path) -> None:
        """NaN inside an input vector fails the non-finite count expectation."""
        table = tensor_table()
        values = np.asarray(table.column("x").combine_chunks().flatten()).copy()
        values[13] = np.nan
        column = pa.FixedSizeListArray.from_arrays(pa.array(values), 6)
        rewrite(frozen, table.set_column(1, "x", column))
        failed = {(o.expectation, o.column) for o in validate_evalset(frozen).failures}
        assert ("expect_column_values_to_be_between", "x__nonfinite") in failed
        assert len(failed) == 1

    def test_tampered_bytes_are_caught_before_validation(self, frozen: Path) -> None:
        """Validation verifies the hashes first; tampered data never reaches GX."""
        data = frozen / "data" / "part-000.parquet"
        data.write_bytes(data.read_bytes() + b"\x00")
        with pytest.raises(EvalsetTampered):
            validate_evalset(frozen)


def test_shipped_digits_evalset_verifies() -> None:
    """The digits evalset shipped with the project verifies and validates."""
    root = Path(__file__).parents[3] / "evalsets"
    summary = validate_evalset("digits", root)
    evalset = load_evalset("digits", evalsets_dir=root)
    assert summary.success
    assert evalset.inputs.shape == (719, 1, 8, 8)
    assert evalset.spec.classes == list(range(10))
    assert evalset.spec.license and evalset.spec.provenance


def test_shipped_digits_evalset_keeps_its_recorded_sha() -> None:
    """The shipped digits evalset is identity version 1 and its recorded sha is unchanged."""
    spec = read_spec(Path(__file__).parents[3] / "evalsets" / "digits")
    assert spec.identity_version == 1
    assert spec.evalset_sha256 == DIGITS_SHA == spec.identity()


WRAP = """
import sys, warnings
import pyarrow as pa
import torch
from evalsentry.evalsets.evalset import shared_tensor
warnings.simplefilter("error")
array = pa.array([1.0, 2.0, 3.0]).to_numpy()
assert not array.flags.writeable
tensor = shared_tensor(array) if sys.argv[1] == "shared" else torch.from_numpy(array)  # raises
print(tensor.tolist())
"""


class TestSharedTensor:
    def test_a_read_only_arrow_array_becomes_a_tensor_without_torch_s_warning(self) -> None:
        """An Arrow-backed array (an evalset's, a live sample's) is read-only: torch warns once
        per process on wrapping it (every weekly run's evaluation child printed it);
        shared_tensor wraps it silently. In a fresh interpreter, as torch warns only once (with
        ``torch`` instead of ``shared`` the script fails on the warning)."""
        import subprocess
        import sys

        shared = subprocess.run(
            [sys.executable, "-c", WRAP, "shared"], capture_output=True, text=True, timeout=120
        )
        assert shared.returncode == 0, shared.stderr  # torch's first wrap here: no warning
        assert shared.stdout.strip() == "[1.0, 2.0, 3.0]"
