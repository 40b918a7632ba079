"""Create the weekly run's alerts on a Prefect server: a webhook block and the automations using it.

``python -m evalsentry.flows.alerts`` (``make alerts``) against the server of ``PREFECT_API_URL``:
saves the webhook block ``evalsentry-alert`` with the URL in ``EVALSENTRY_ALERT_WEBHOOK_URL``,
then creates the automations of ``week-alerts.yaml`` (next to this module) with that block's id:
a Failed run (the flow's own event), a Crashed run (Prefect's state event), and a run that has
not ended within the grace period (``--grace``, or ``EVALSENTRY_ALERT_GRACE``; default 6h).
Running it again updates each in place; it never makes a second block or automation.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
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
GRACE_VARIABLE = "EVALSENTRY_ALERT_GRACE"
BLOCK_NAME = "evalsentry-alert"
AUTOMATION_FILE = Path(__file__).with_name("week-alerts.yaml")
#: How long a weekly run may take past its scheduled time (or its start) before it is overdue.
DEFAULT_GRACE = "6h"
MIN_GRACE = timedelta(seconds=10)  # Prefect's least window for a proactive trigger
GRACE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
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


def grace_period(text: str) -> timedelta:
    """``90s``, ``30m``, ``6h``, ``1d`` (or plain seconds) as a duration of at least 10 s."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise AlertSetupError(
            f"grace period {text!r}: give a number and a unit, like 90s, 30m, 6h or 1d"
        )
    grace = timedelta(seconds=float(match.group(1)) * GRACE_UNITS[match.group(2) or "s"])
    if grace < MIN_GRACE:
        raise AlertSetupError(f"grace period {text!r}: Prefect needs at least 10 seconds")
    return grace


def _words(grace: timedelta) -> str:
    """A duration as the alert says it: ``6h``, ``90m``, ``45s``."""
    seconds = int(grace.total_seconds())
    for unit, size in sorted(GRACE_UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def load_automations(
    path: Path, block_id: UUID, grace: timedelta = timedelta(hours=6)
) -> list[AutomationCore]:
    """The automations in ``path``, ready for the server.

    Each call-webhook action is pointed at ``block_id``, and each proactive trigger's window is
    set to ``grace`` (its payload's ``%GRACE%`` says how long that is).
    """
    from prefect.events.schemas.automations import AutomationCore

    document: Any = yaml.safe_load(path.read_text())
    listed = document.get("automations") if isinstance(document, dict) else None
    if not isinstance(listed, list) or not listed:
        raise AlertSetupError(f"{path}: expected a list of automations under `automations:`")
    automations = []
    for item in listed:
        actions = [a for a in item.get("actions", []) if a.get("type") == "call-webhook"]
        if not actions:
            raise AlertSetupError(
                f"{path}: {item.get('name')}: no call-webhook action to point at the webhook block"
            )
        for action in actions:
            action["block_document_id"] = str(block_id)
            action["payload"] = str(action.get("payload", "")).replace("%GRACE%", _words(grace))
        trigger = item.get("trigger", {})
        if trigger.get("posture") == "Proactive":
            trigger["within"] = grace.total_seconds()
        automations.append(AutomationCore.model_validate(item))
    return automations


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
    """Set up the block and the automations; 0 on success, 2 with a message when it cannot."""
    parser = argparse.ArgumentParser(prog="python -m evalsentry.flows.alerts", description=__doc__)
    parser.add_argument("--file", type=Path, default=AUTOMATION_FILE, help="automations YAML")
    parser.add_argument("--block", default=BLOCK_NAME, help="name of the webhook block")
    parser.add_argument(
        "--grace",
        default=os.environ.get(GRACE_VARIABLE) or DEFAULT_GRACE,
        help="how long a weekly run may go past its scheduled time (or its start) before the "
        f"overdue alert: 90s, 30m, 6h, 1d (default ${GRACE_VARIABLE}, else {DEFAULT_GRACE})",
    )
    args = parser.parse_args(argv)
    try:
        url = webhook_url(os.environ)
        grace = grace_period(args.grace)
        load_automations(args.file, UUID(int=0), grace)  # checked before anything is saved
        block_id = save_webhook(url, args.block)
        automations = load_automations(args.file, block_id, grace)
        applied = [(a.name, apply_automation(a)) for a in automations]
    except (AlertSetupError, OSError, yaml.YAMLError, ValidationError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201 - a command-line entry point
        return 2
    except httpx.HTTPError as exc:  # no server, or the server refused the block or automation
        print(f"error: Prefect API: {exc!r}", file=sys.stderr)  # noqa: T201 - as above
        return 2
    lines = [f"webhook block {args.block} {block_id}"]
    lines += [f"automation {name} {automation_id}" for name, automation_id in applied]
    lines.append(f"grace period {_words(grace)}")
    print("\n".join(lines))  # noqa: T201 - a command-line entry point
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
