"""What a person reads of an imported example: its question, expected answer and response.

A harness keys examples by hashes (lm-eval's ``doc_hash``) or ids; a flip or a changed prompt
named only so cannot be read. Each example keeps, cut to :data:`TEXT_CHARS` characters:
``doc_id`` (lm-eval's row number; Inspect's sample id is the example id already),
``question`` (the document's question field, else the end of the prompt the model saw),
``expected`` (the target; a multiple-choice target as its choice) and ``response`` (what the
model answered, as the harness filtered it; a multiple-choice answer as the likeliest choice).
They are shown, escaped, in reports and refusals; nothing is computed from them.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

#: The most characters of each text kept per example.
TEXT_CHARS = 200
#: The per-example text columns, in the order they are shown.
TEXT_COLUMNS = ("doc_id", "question", "expected", "response")
#: Document fields that hold the question, as common lm-eval tasks name it, tried in order.
QUESTION_FIELDS = ("question", "query", "problem", "prompt", "input", "goal", "sentence", "text")


def visible(text: str) -> str:
    r"""``text`` with each control or format character as its escape (``\x1b``, ``\u202e``).

    Control characters (ESC, NUL) and format ones, which reorder or hide text (bidi overrides
    and marks, zero-width characters, the byte-order mark): a value from data or a log is shown,
    never acted on. One helper for the console tables, the HTML report and imported texts.
    """
    return "".join(_escape(char) if unicodedata.category(char) in ("Cc", "Cf") else char for char in text)  # fmt: skip


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clip(value: Any) -> str:
    """``value`` as one line of at most :data:`TEXT_CHARS` characters (``…`` where cut).

    A control character (ESC, NUL) or an invisible one that reorders or hides text (a bidi
    override, a zero-width mark) is left as its escape: text to show, never to act on.
    """
    text = visible(" ".join(str(value).split()))
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def lm_eval_texts(row: Mapping[str, Any]) -> dict[str, str]:
    """An lm-eval sample's texts (see the module); a field missing or odd gives ``""``."""
    arguments = row.get("arguments")
    requests = list(arguments.values()) if isinstance(arguments, Mapping) else []
    requests = [r for r in requests if isinstance(r, Mapping)]
    contexts = [str(r.get("arg_0", "")) for r in requests]
    choices = [str(r.get("arg_1", "")) for r in requests]
    given = row.get("doc")
    doc: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    asked = next((doc[f] for f in QUESTION_FIELDS if isinstance(doc.get(f), str)), None)
    question = asked if asked is not None else (contexts[0][-TEXT_CHARS:] if contexts else "")
    target = row.get("target")
    expected: Any = target
    if len(set(contexts)) == 1 and len(choices) > 1 and _index(target, len(choices)) is not None:
        expected = choices[_index(target, len(choices)) or 0]
    return {
        "doc_id": clip(row.get("doc_id", "")),
        "question": clip(question),
        "expected": clip("" if expected is None else expected),
        "response": clip(_response(row.get("filtered_resps"), choices)),
    }


def _response(responses: Any, choices: Sequence[str]) -> str:
    """Generated text as it is; loglikelihoods over choices as the likeliest choice."""
    if not isinstance(responses, list) or not responses:
        return ""
    if all(isinstance(r, str) for r in responses):
        return str(responses[0])
    scores = [_number(r[0] if isinstance(r, list) and r else r) for r in responses]
    if len(scores) == len(choices) and all(s is not None for s in scores):
        return choices[max(range(len(scores)), key=lambda i: scores[i] or 0.0)]
    return str(responses[0])


def _index(value: Any, count: int) -> int | None:
    number = _number(value)
    if number is None or number != int(number) or not 0 <= number < count:
        return None
    return int(number)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def inspect_texts(sample: Any) -> dict[str, str]:
    """An Inspect sample's texts: its input's last message, target and completion (its epoch's)."""
    given = sample.input
    if isinstance(given, list):  # chat messages: the last one is the question
        given = getattr(given[-1], "text", "") if given else ""
    target = sample.target
    output = getattr(sample, "output", None)
    return {
        "question": clip(given),
        "expected": clip(", ".join(target) if isinstance(target, list) else target),
        "response": clip(getattr(output, "completion", "") if output is not None else ""),
    }
