"""History and registry on an S3 object store (a moto server on loopback), through flow and CLI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evalsentry.checkpoints.registry import Registry
from evalsentry.cli import main
from evalsentry.config import load_config
from evalsentry.flows.weekly_eval import weekly_eval
from tests.models import TRUST, TRUSTED_YAML, retrained_checkpoints

BUCKET = "evalsentry-test"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """`moto_server` on a free loopback port, with a bucket; stopped by pid afterwards."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("moto server did not start")
                time.sleep(0.3)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture
def s3_project(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, toy_evalset: Path
) -> Path:
    """A project whose store and registry live in a fresh prefix of the S3 bucket."""
    import boto3
    import s3fs

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    client = boto3.client("s3")
    if BUCKET not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=BUCKET)
    prefix = f"s3://{BUCKET}/{tmp_path.name}"
    config = tmp_path / "evalsentry.yaml"
    config.write_text(
        f"store: {prefix}/store\nregistry: {prefix}/registry\nevalsets: {toy_evalset.parent}\n"
        + TRUSTED_YAML
    )
    return config


def _objects(prefix: str) -> list[str]:
    import boto3

    pages = (
        boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    )
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_weekly_flow_and_gate_on_an_s3_store(
    s3_project: Path, toy_checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Registry and history in S3: two weeks run through the flow; the CLI gate reads the regression."""
    config = str(s3_project)
    assert (
        main(
            [
                "register",
                str(toy_checkpoints["good"]),
                "--model",
                "toy-model",
                "--new-model",
                "--stage",
                "production",
                "--config",
                config,
            ]
        )
        == 0
    )
    assert weekly_eval(week="2026-W40", config_path=config, return_state=True).is_completed()
    registry = Registry(load_config(s3_project).registry_url)
    entry = registry.register(toy_checkpoints["degraded"], "toy-model", trust=TRUST)
    registry.promote("toy-model", entry.version, "production")
    assert weekly_eval(week="2026-W41", config_path=config, return_state=True).is_failed()
    capsys.readouterr()
    assert main(["gate", "--config", config]) == 1
    assert "toy-model@v2 on toy: accuracy vs previous-week" in capsys.readouterr().err
    keys = _objects(s3_project.parent.name)
    assert any("/store/evaluations/" in k for k in keys) and any(
        "/store/predictions/" in k for k in keys
    )
    assert any(k.endswith("/registry/toy-model/v000002.json") for k in keys)
    assert not [
        k for k in keys if k.rsplit("/", 1)[-1].startswith(".")
    ]  # no temporary objects on S3


def test_racing_registrations_on_s3_get_distinct_versions(
    s3_project: Path, tmp_path: Path, train_data: Path
) -> None:
    """Version claims use S3 conditional writes: concurrent registrations never overwrite each other."""
    # six different files: the same file again would be the existing version
    files = retrained_checkpoints(tmp_path / "raced", 6, train_data, features=4, classes=3)
    registry = Registry(load_config(s3_project).registry_url)
    with ThreadPoolExecutor(max_workers=6) as pool:
        entries = list(pool.map(lambda f: registry.register(f, "raced", trust=TRUST), files))
    assert sorted(e.version for e in entries) == list(range(1, 7))
    assert len(registry.list("raced")) == 6


def test_evalset_on_s3_is_verified_by_streaming_and_tampering_is_caught(
    s3_project: Path, toy_evalset: Path, toy_checkpoints: dict[str, Path]
) -> None:
    """An evalset folder copied to S3 runs like a local one; one changed byte there fails the run."""
    import s3fs

    remote = f"{BUCKET}/{s3_project.parent.name}/evalsets"
    fs = s3fs.S3FileSystem()
    fs.put(str(toy_evalset), f"{remote}/toy", recursive=True)
    text = s3_project.read_text().replace(
        f"evalsets: {toy_evalset.parent}", f"evalsets: s3://{remote}"
    )
    s3_project.write_text(text)
    config = str(s3_project)
    Registry(load_config(s3_project).registry_url).register(
        toy_checkpoints["good"], "toy-model", stage="production", trust=TRUST
    )
    assert weekly_eval(week="2026-W40", config_path=config, return_state=True).is_completed()
    data = f"{remote}/toy/data/part-000.parquet"
    raw = bytearray(fs.cat_file(data))
    raw[len(raw) // 2] ^= 0x01
    fs.pipe_file(data, bytes(raw))
    state = weekly_eval(week="2026-W41", config_path=config, return_state=True)
    assert state.is_failed()
    assert f"s3://{data}: evalset file changed since freeze" in state.message
