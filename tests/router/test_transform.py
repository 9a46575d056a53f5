"""The transform language (htgrid.submit.Transform), against the manual's examples and
xform_utils.cpp's rules."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.submit import SubmitError, Transform, TransformMacros


def _apply(text: str, ad: str, **config: str) -> ClassAd:
    job = ClassAd(ad)
    Transform.parse(text, "t").apply(job, TransformMacros(config=config))
    return job


def test_set_default_evalset_and_macros_in_written_order() -> None:
    job = _apply(
        """
        # the manual's kinds of statement
        tmp = 5
        SET Foo $(tmp) + 1
        DEFAULT Owner "bob"
        DEFAULT Group "$(MY.Owner)-group"
        EVALSET Doubled Foo * 2
        SET Later Foo
        SET Foo 100
        """,
        '[Owner = "alice"]',
    )
    assert str(job.lookup("Foo")) == "100"
    assert job["Owner"] == "alice"  # DEFAULT leaves what is there
    assert job["Group"] == "alice-group"  # $(MY.attr) of a string is its characters
    assert job["Doubled"] == 12  # EVALSET stores the value at that step
    assert str(job.lookup("Later")) == "Foo"  # SET stores the expression
    assert "tmp" not in job  # a macro is no attribute


def test_my_attr_default_and_expression_text() -> None:
    job = _apply(
        'SET A $(MY.Missing:7)\nSET B $(MY.Expr)\nSET C "$(COLLECTOR_NAME)"',
        "[Expr = RequestCpus * 2; RequestCpus = 3]",
        COLLECTOR_NAME="jira902",
    )
    assert job["A"] == 7
    assert str(job.lookup("B")) == "RequestCpus * 2" and job.eval("B") == 6
    assert job["C"] == "jira902"  # the configuration is the last place looked


def test_if_elif_else_with_conditions_in_the_ad_and_evalmacro() -> None:
    text = """
    EVALMACRO cpus RequestCpus * 2
    if $(cpus) > 8
      SET Size "big"
    elif defined MY.WantWholeNode
      SET Size "whole"
    else
      SET Size "small"
    endif
    if ! defined MY.Nope
      SET NoNope true
    endif
    """
    assert _apply(text, "[RequestCpus = 8]")["Size"] == "big"
    assert _apply(text, "[RequestCpus = 1; WantWholeNode = true]")["Size"] == "whole"
    assert _apply(text, "[RequestCpus = 1]")["Size"] == "small"
    assert _apply(text, "[RequestCpus = 1]")["NoNope"] is True


def test_copy_rename_delete_by_name_and_by_regex() -> None:
    job = _apply(
        """
        COPY Cmd OrigCmd
        RENAME Args Arguments
        DELETE Gone
        COPY /^Request(.*)$/ Orig_\\1
        RENAME /^x509(.*)$/ Old\\1
        DELETE /^orig_mem/
        """,
        '[Cmd = "/bin/x"; Args = "a b"; Gone = 1; RequestCpus = 2; RequestMemory = 3;'
        ' x509UserProxy = "p"]',
    )
    assert job["OrigCmd"] == "/bin/x" and job["Cmd"] == "/bin/x"
    assert job["Arguments"] == "a b" and "Args" not in job
    assert "Gone" not in job
    assert job["Orig_Cpus"] == 2 and "Orig_Memory" not in job  # regexes ignore case
    assert job["OldUserProxy"] == "p" and "x509UserProxy" not in job


def test_requirements_and_universe_are_the_envelope() -> None:
    xform = Transform.parse(
        "NAME Prod\nUNIVERSE Vanilla\nREQUIREMENTS RouteMe && (ProcId & 1)\nSET P 1", ""
    )
    assert xform.name == "Prod" and xform.universe == 5
    assert xform.matches(ClassAd("[RouteMe = true; ProcId = 1]"))
    assert not xform.matches(ClassAd("[RouteMe = true; ProcId = 2]"))
    assert not xform.matches(ClassAd("[ProcId = 1]"))  # undefined is no match


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FROB x 1", "FROB is not a valid transform keyword"),
        ("SET x", "SET needs 2 arguments"),
        ("SET x 1 +", "invalid expression"),
        ("if true\nSET x 1", "if without matching endif"),
        ("endif", "endif without matching if"),
        ("COPY /a( b/ x", "invalid regex"),
        ("UNIVERSE nonesuch", "no such universe"),
    ],
)
def test_a_bad_transform_is_refused_with_its_name_and_line(text: str, problem: str) -> None:
    with pytest.raises(SubmitError, match=problem) as err:
        Transform.parse(f"# first\n{text}", "myroute")
    assert str(err.value).startswith("myroute:")


def test_an_if_that_is_no_condition_stops_the_transform_at_its_line() -> None:
    xform = Transform.parse("SET a 1\nif MY.Foo\nSET b 2\nendif", "r")
    with pytest.raises(SubmitError, match=r"r:2: .*not a valid if condition"):
        xform.apply(ClassAd("[Foo = 1]"))
