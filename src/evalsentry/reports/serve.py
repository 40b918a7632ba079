"""A small read-only web server for ``<store>/reports``, so the Prefect UI's report link opens.

Browsers refuse ``file://`` links from a web page (the Prefect UI is one), even on the host
that holds the file. ``evalsentry serve-reports`` serves the reports folder of a local store
over HTTP, on loopback unless told otherwise, and the weekly run's link artifact points at it
(``reports_url`` in ``evalsentry.yaml``, else :data:`evalsentry.reports.report.DEFAULT_REPORTS_URL`).
It answers GET and HEAD for files in that folder and nothing else.
"""

from __future__ import annotations

import functools
import logging
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ReportHandler(SimpleHTTPRequestHandler):
    """Files of one folder, read-only: Markdown as UTF-8 text, nothing cached, quiet."""

    extensions_map = {  # noqa: RUF012 - the base class's attribute, extended
        **SimpleHTTPRequestHandler.extensions_map,
        ".md": "text/markdown; charset=utf-8",
        ".html": "text/html; charset=utf-8",
    }

    def end_headers(self) -> None:
        """Every answer says: do not cache (a week's latest report is rewritten in place)."""
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to the module's logger, not to stderr."""
        log.info("%s %s", self.address_string(), format % args)


def report_server(folder: Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server of ``folder`` bound to ``host:port`` (0: any free port), not yet serving."""
    handler = functools.partial(ReportHandler, directory=str(folder))
    return ThreadingHTTPServer((host, port), handler)
