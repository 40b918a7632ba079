"""What a person reads of an imported example: cut, one line, nothing that acts on a screen."""

from __future__ import annotations

from evalsentry.harnesses.example_text import TEXT_CHARS, lm_eval_texts
from evalsentry.reports.html_report import esc


def test_a_hostile_document_is_shown_as_text() -> None:
    """ESC, NUL, a bidi override and a newline in a question; a long answer: escaped, cut."""
    row = {
        "doc_id": 7,
        "doc": {"question": "What is\n2\x1b[2J plus \u202e2\x00?"},
        "target": "4" * 500,
        "arguments": {"gen_args_0": {"arg_0": "Q: ...", "arg_1": ""}},
        "filtered_resps": ["5"],
    }
    texts = lm_eval_texts(row)
    assert texts["doc_id"] == "7" and texts["response"] == "5"
    assert texts["question"] == "What is 2\\x1b[2J plus \\u202e2\\x00?"
    assert len(texts["expected"]) == TEXT_CHARS and texts["expected"].endswith("…")
    assert esc("a\u2066b<") == "a\\u2066b&lt;"


def test_a_multiple_choice_answer_is_its_likeliest_choice() -> None:
    """Loglikelihoods over the choices: the target and the response as choice text."""
    row = {
        "doc_id": 0,
        "doc": {"query": "What is 1 plus 1?"},
        "target": 1,
        "arguments": {
            f"gen_args_{i}": {"arg_0": "Q:", "arg_1": f" {c}"} for i, c in enumerate("123")
        },
        "filtered_resps": [["-3.0", "False"], ["-0.5", "True"], ["-0.1", "False"]],
    }
    texts = lm_eval_texts(row)
    assert (texts["question"], texts["expected"], texts["response"]) == (
        "What is 1 plus 1?",
        "2",
        "3",
    )


def test_every_format_character_is_an_escape_in_the_console_and_the_report_alike() -> None:
    """One helper: the Arabic letter mark, word joiner, byte-order mark and a language tag are
    format characters (category Cf) like the bidi overrides; the console and HTML show escapes."""
    from evalsentry.cli.output import visible as console_visible
    from evalsentry.harnesses.example_text import visible
    from evalsentry.reports.html_report import esc

    text = "a\u061cb\u2060c\ufeffd\U000e0001e\tf"
    assert visible(text) == "a\\u061cb\\u2060c\\ufeffd\\U000e0001e\\x09f"
    assert console_visible is visible
    assert esc(text) == "a\\u061cb\\u2060c\\ufeffd\\U000e0001e\\x09f"
