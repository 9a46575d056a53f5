"""Deliberate differences from classad2: each case, the reason, and htgrid's pinned answer.

A case listed in deliberate.json must give exactly the recorded htgrid result (so a
deliberate difference cannot drift into an accident), and classad2 must still give its
recorded result. `python record_deliberate.py` rewrites the file from the current run,
keeping only cases whose reason it can name; anything else stays a failure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FILE = Path(__file__).resolve().parent / "deliberate.json"

# Reasons, by a fragment of the case label (first match wins).
REASONS: list[tuple[str, str]] = [
    (
        "//",
        "classad2 parses ExprTree(text) as '[expression = text]', so a // comment "
        "swallows the closing bracket; htgrid parses the expression itself",
    ),
    (
        "1; b = 2",
        "classad2's '[expression = text]' wrapping accepts trailing attributes; "
        "htgrid refuses text after the expression",
    ),
    ("1] [", "classad2's '[expression = text]' wrapping ignores the rest; htgrid refuses it"),
    ("a..b", "a double dot is not ClassAd syntax; classad2's parser skips it silently"),
    (
        "'[ a = 1 ]\\n'",
        "new syntax given to the old-syntax parser: classad2 reads an "
        "attribute named '[ a'; htgrid reports the line",
    ),
    ("junk", "classad2 ignores text after an ad; htgrid refuses it with its position"),
    (
        "[ a = 1 ] [ b = 2 ]",
        "a constructor given two ads keeps the first in classad2; "
        "htgrid refuses the second rather than dropping it",
    ),
    ("[a=", "classad2 drops an unfinished ad silently; htgrid reports where it ends"),
    ("garbage", "classad2 returns None for unparsable text; htgrid reports the error"),
    ("not an ad", "classad2 skips malformed old-syntax lines; htgrid reports the line"),
    ("a = \\nb = 2", "classad2 drops the ad with an empty value; htgrid reports the line"),
    (
        "/* comment */",
        "classad2 drops an old-syntax ad after a comment line; htgrid skips "
        "the comment (HTCondor's own binding test expects that) and keeps the ad",
    ),
    ("\\u00e9", "classad2 truncates JSON \\u escapes to bytes; htgrid decodes them"),
    ("[{", "htgrid also reads a JSON array of ads (the form many tools write)"),
    (
        "random(0)",
        "classad2 raises from inside the evaluator; built-ins in htgrid never raise, "
        "they give error",
    ),
    (
        "random(-1)",
        "classad2 raises from inside the evaluator; built-ins in htgrid never "
        "raise, they give error",
    ),
    (
        "formatTime([a=1]",
        "a day of 0 cannot be formatted by Python's strftime; htgrid normalises the missing fields",
    ),
    (
        'access_times["globus"].start',
        "classad2 loses the ad a subscript returns before the "
        "selection reads it; htgrid gives the attribute's value",
    ),
    (
        "root",
        "with a target, classad2 evaluates inside its internal MatchClassAd, whose "
        "LEFT/RIGHT/lCtx/rCtx names leak into 'root'; in htgrid 'root' is the ad's own root",
    ),
    ("LEFT.", "the internal MatchClassAd names LEFT and RIGHT are not exposed by htgrid"),
    ("RIGHT.", "the internal MatchClassAd names LEFT and RIGHT are not exposed by htgrid"),
    ("c.e @scope", "c.e is root.a: see 'root' (classad2's internal MatchClassAd)"),
]

# API scenarios (test_api.py) that differ on purpose, by name.
API_REASONS: dict[str, str] = {
    "ClassAd(trailing junk)": "classad2 ignores text after an ad; htgrid refuses it",
    "ClassAd(two ads)": "classad2 keeps the first of two ads; htgrid refuses the second",
    "parseNext(StringIO) needs a fileno": "htgrid reads any text stream, not only real files",
}


def key_of(label: str, case: dict[str, Any]) -> str:
    """A stable key for a case: its label plus a digest (labels alone can repeat)."""
    digest = hashlib.sha1(json.dumps(case, sort_keys=True).encode()).hexdigest()[:10]
    return f"{label}#{digest}"


def reason_for(label: str) -> str | None:
    for fragment, reason in REASONS:
        if fragment in label:
            return reason
    return None


def load() -> dict[str, dict[str, Any]]:
    if not FILE.exists():
        return {}
    entries = json.loads(FILE.read_text())
    return {e["key"]: e for e in entries}
