"""A late materialization digest from a CEDAR client made into procs by the schedd, and
the digests it refuses: a remote user's text may not read the schedd's files or run its
commands."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.schedd._qmgmt_factory import ITEMS_NAME, Factory, FactoryRefused, materialize, take

# What htcondor2 25.14.1 sent for `arguments = x $(Process) $(item)`, `item in a, b, c`.
DIGEST = (
    "FACTORY.Requirements=MY.Requirements\n"
    "arguments=x $(Process) $(item)\n"
    "FACTORY.Iwd=/tmp\n"
    "max_materialize=2\n"
    "output=out.$(Process)\n"
    f"\nQueue 1 item from {ITEMS_NAME}\n"
)
CLUSTER_AD = ClassAd({"Cmd": "/bin/echo", "Iwd": "/tmp", "Args": "x 0 a", "Out": "out.0"})


def _procs(digest: str, items: bytes | None = b"a\nb\nc\n") -> list[ClassAd]:
    return list(materialize(7, CLUSTER_AD, Factory(2, digest, items), owner="alice", qdate=1))


def test_each_later_proc_gets_what_it_has_of_its_own() -> None:
    procs = _procs(DIGEST)
    assert [dict(p) for p in procs] == [
        {},
        {"Args": "x 1 b", "Out": "out.1"},
        {"Args": "x 2 c", "Out": "out.2"},
    ]


def test_rows_of_several_variables_come_joined_by_the_unit_separator() -> None:
    digest = DIGEST.replace("$(item)", "$(a)-$(b)").replace("item from", "a,b from")
    procs = _procs(digest, b"1\x1fone\n2\x1ftwo\n")
    assert procs[1]["Args"] == "x 1 2-two"


def test_a_count_without_items() -> None:
    assert len(_procs("arguments=$(Process)\nQueue 4\n", None)) == 4


@pytest.mark.parametrize(
    ("digest", "why"),
    [
        ("include : /etc/passwd\nQueue 1\n", "include"),
        ("include command : id |\nQueue 1\n", "include"),
        ("arguments=$(item)\nQueue item from /etc/passwd\n", "not from '/etc/passwd'"),
        ("arguments=$(item)\nQueue item from ls / |\n", "not from"),
        ("arguments=$(item)\nQueue item matching /etc/*\n", "list files"),
        ("arguments=$(item)\nQueue 1\nQueue 2\n", "one Queue"),
        ("arguments=1\n", "no Queue"),
    ],
)
def test_a_digest_may_not_reach_the_schedds_files_or_commands(digest: str, why: str) -> None:
    with pytest.raises(FactoryRefused, match=why):
        _procs(digest)


def test_items_named_but_not_sent() -> None:
    with pytest.raises(FactoryRefused, match="not sent"):
        _procs(DIGEST, None)


def test_a_large_factory_is_made_a_batch_at_a_time() -> None:
    procs = materialize(
        7, CLUSTER_AD, Factory(10, "arguments=$(Process)\nQueue 100000\n"), owner="a", qdate=1
    )
    assert len(take(procs, 1000)) == 1000
    assert take(procs, 1)[0]["Args"] == "1000"


def test_a_multi_line_value_is_taken_whole() -> None:
    """`key @=end ... @end`, as the client sends a value with newlines: its lines are the
    value's, even one that reads like a Queue statement."""
    digest = "note @=end\nA=$(Process)\nqueue 99\n@end\narguments=$(Process) $(note)\nQueue 2\n"
    procs = _procs(digest, None)
    assert [p.get("Args") for p in procs] == [None, "1 A=1 queue 99"]
