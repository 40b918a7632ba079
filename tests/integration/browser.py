"""Headless Chromium driven over the DevTools protocol: open a page, run JavaScript, screenshot.

Only the system browser and the `websockets` package (a Prefect dependency) are needed: the
browser prints its DevTools WebSocket address, and each command is one JSON message on it.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.integration.prefect_server import stop

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--hide-scrollbars",
    "--remote-debugging-port=0",  # a free port, written to DevToolsActivePort in the profile
)
STARTUP_S = 60


class Page:
    """One browser tab, at a fixed viewport, commanded over its DevTools session."""

    def __init__(self, socket: ClientConnection, session: str) -> None:
        self.socket, self.session = socket, session
        self.ids = itertools.count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command to the tab; its result (events in between are skipped)."""
        sent = next(self.ids)
        self.socket.send(
            json.dumps({"id": sent, "method": method, "params": params, "sessionId": self.session})
        )
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript ``expression`` in the page (awaited if it is a promise)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate to ``url`` (what it loads afterwards, the caller waits for)."""
        self.send("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout_s: float = 60) -> Any:
        """Poll ``expression`` until it is truthy; its value. Fails with the page's text if never."""
        deadline = time.monotonic() + timeout_s
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText : ''")
                raise TimeoutError(f"{expression} still false; the page reads:\n{text[:1500]}")
            time.sleep(0.25)
        return value

    def screenshot(self, path: Path, clip: dict[str, float] | None = None) -> Path:
        """Save a PNG of the viewport (or of ``clip``: x, y, width, height in CSS pixels)."""
        params: dict[str, Any] = {"format": "png"}
        if clip:
            params["clip"] = {**clip, "scale": 1}
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Page]:
    """Headless Chromium with one blank tab of ``width`` x ``height`` CSS pixels."""
    if CHROMIUM is None:
        raise FileNotFoundError("chromium is not installed")
    # A helper process may still write to the profile as the browser ends: cleanup is best-effort.
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as folder:
        profile, log = Path(folder) / "profile", Path(folder) / "chromium.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # to stop its helper processes with it
            )
        try:
            with connect(_devtools_url(profile, process, log), max_size=None) as socket:
                page = _new_tab(socket)
                page.send(
                    "Emulation.setDeviceMetricsOverride",
                    width=width,
                    height=height,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                yield page
        finally:
            stop(process)


def _devtools_url(profile: Path, process: subprocess.Popen[bytes], log: Path) -> str:
    """The browser's DevTools WebSocket address, from the file it writes in its profile."""
    written = profile / "DevToolsActivePort"  # the port, then the browser's path
    deadline = time.monotonic() + STARTUP_S
    while not (written.exists() and len(lines := written.read_text().split()) == 2):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"chromium gave no DevTools address:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)
    return f"ws://127.0.0.1:{lines[0]}{lines[1]}"


def _new_tab(socket: ClientConnection) -> Page:
    """A new blank tab, attached as a flat session on the browser's socket."""
    browser = Page(socket, "")

    def command(method: str, **params: Any) -> dict[str, Any]:
        sent = next(browser.ids)
        socket.send(json.dumps({"id": sent, "method": method, "params": params}))
        while (message := json.loads(socket.recv(timeout=60))).get("id") != sent:
            pass
        return message["result"]  # type: ignore[no-any-return]

    target = command("Target.createTarget", url="about:blank")["targetId"]
    session = command("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    return Page(socket, session)
