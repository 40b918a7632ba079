"""Create the regression alert on a Prefect server: a webhook block and the automation using it.

``python -m evalsentry.flows.alerts`` (``make alerts``) against the server of ``PREFECT_API_URL``: saves the
webhook block ``evalsentry-alert`` with the URL in ``EVALSENTRY_ALERT_WEBHOOK_URL``, then creates
the automation of ``regression-alert.yaml`` (next to this module) with that block's id. Running it again
updates both in place; it never makes a second block or automation.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit
from uuid import UUID

import httpx
import yaml
from pydantic import ValidationError

if TYPE_CHECKING:
    from prefect.events.schemas.automations import AutomationCore

URL_VARIABLE = "EVALSENTRY_ALERT_WEBHOOK_URL"
BLOCK_NAME = "evalsentry-alert"
AUTOMATION_FILE = Path(__file__).with_name("regression-alert.yaml")
# The call-webhook action sends its rendered payload as a raw body: say that it is JSON.
HEADERS = {"Content-Type": "application/json"}


class AlertSetupError(Exception):
    """The alert cannot be set up as asked; the message says what to fix."""


def webhook_url(environ: dict[str, str] | os._Environ[str]) -> str:
    """The webhook URL from the environment, checked to be an absolute http(s) URL."""
    url = environ.get(URL_VARIABLE, "").strip()
    if not url:
        raise AlertSetupError(
            f"{URL_VARIABLE} is not set: export the URL the alert should POST to "
            "(a Slack incoming webhook, a chat or incident tool's endpoint)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AlertSetupError(f"{URL_VARIABLE} must be an http(s) URL with a host, got {url!r}")
    return url


def load_automation(path: Path, block_id: UUID) -> AutomationCore:
    """The automation in ``path`` with every call-webhook action pointed at ``block_id``."""
    from prefect.events.schemas.automations import AutomationCore

    document: dict[str, Any] = yaml.safe_load(path.read_text())
    actions = [a for a in document.get("actions", []) if a.get("type") == "call-webhook"]
    if not actions:
        raise AlertSetupError(f"{path}: no call-webhook action to point at the webhook block")
    for action in actions:
        action["block_document_id"] = str(block_id)
    return AutomationCore.model_validate(document)


def save_webhook(url: str, name: str = BLOCK_NAME) -> UUID:
    """Save (or overwrite) the webhook block ``name`` posting JSON to ``url``; its document id."""
    from prefect.blocks.webhook import Webhook

    block = Webhook(method="POST", url=url, headers=HEADERS)
    return cast("UUID", block.save(name, overwrite=True))  # called from sync code: runs sync


def apply_automation(automation: AutomationCore) -> UUID:
    """Create ``automation``, or update the one of its name (removing duplicates); its id."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(automation.name)
        if not existing:
            return client.create_automation(automation)
        keep, *duplicates = existing
        client.update_automation(keep.id, automation)
        for duplicate in duplicates:  # each would send its own copy of every alert
            client.delete_automation(duplicate.id)
        return keep.id


def main(argv: Sequence[str] | None = None) -> int:
    """Set up the block and the automation; 0 on success, 2 with a message when it cannot."""
    parser = argparse.ArgumentParser(prog="python -m evalsentry.flows.alerts", description=__doc__)
    parser.add_argument("--file", type=Path, default=AUTOMATION_FILE, help="automation YAML")
    parser.add_argument("--block", default=BLOCK_NAME, help="name of the webhook block")
    args = parser.parse_args(argv)
    try:
        url = webhook_url(os.environ)
        automation = load_automation(args.file, UUID(int=0))  # checked before anything is saved
        block_id = save_webhook(url, args.block)
        automation_id = apply_automation(load_automation(args.file, block_id))
    except (AlertSetupError, OSError, yaml.YAMLError, ValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201 - a command-line entry point
        return 2
    except httpx.HTTPError as exc:  # no server, or the server refused the block or automation
        print(f"error: Prefect API: {exc!r}", file=sys.stderr)  # noqa: T201 - as above
        return 2
    print(  # noqa: T201 - a command-line entry point
        f"webhook block {args.block} {block_id}\nautomation {automation.name} {automation_id}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
