"""`evalsentry serve-reports`: the report folder over HTTP, so the UI's report link opens."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsentry.reports.serve import report_server


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A reports folder with one report and a file beside it, served on a free loopback port."""
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "weekly-eval-2026-W41-manual-abc123.html").write_text("<html>week</html>")
    (tmp_path / "secret.txt").write_text("not a report")
    server = report_server(reports)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reports, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


class TestReportServer:
    def test_a_report_opens_over_http_uncached(self, served: tuple[Path, str]) -> None:
        """GET of a report: 200, HTML as UTF-8, never cached (a week's copy is rewritten)."""
        _, url = served
        with urllib.request.urlopen(f"{url}/weekly-eval-2026-W41-manual-abc123.html") as reply:  # noqa: S310 - loopback
            assert reply.status == 200 and reply.read() == b"<html>week</html>"
            assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
            assert reply.headers["Cache-Control"] == "no-store"

    def test_nothing_outside_the_folder_is_served_and_nothing_is_written(
        self, served: tuple[Path, str]
    ) -> None:
        """A path out of the folder is not found; a POST is refused (read-only)."""
        _, url = served
        with pytest.raises(urllib.error.HTTPError) as outside:
            urllib.request.urlopen(f"{url}/../secret.txt")  # noqa: S310 - loopback
        assert outside.value.code == 404
        post = urllib.request.Request(f"{url}/x.html", data=b"x", method="POST")  # noqa: S310
        with pytest.raises(urllib.error.HTTPError) as written:
            urllib.request.urlopen(post)  # noqa: S310 - loopback
        assert written.value.code == 501
