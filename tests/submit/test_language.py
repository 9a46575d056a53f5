"""Unit tests of the submit language: lines, macros, conditionals, queue statements."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.submit import SubmitDescription, SubmitError
from htgrid.submit._argsenv import Environment, join_v2, parse_args_v1_wacked_or_v2_quoted
from htgrid.submit._lines import logical_lines
from htgrid.submit._macros import Expander, MacroSet
from htgrid.submit._queue import ForEach, Slice, parse_queue_args, split_item


def expand(text: str, **macros: str) -> str:
    x = Expander(MacroSet(macros), defaults={"Process": "0", "Cluster": "1"}, env={"HOME": "/root"})
    return x.expand(text)


def test_continuation_and_comments() -> None:
    lines = [raw.text for raw in logical_lines("a = 1 \\\n   2\n# note \\\nb = 3\r\n")]
    assert lines == ["a = 1 2", "# note \\", "b = 3", ""]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(foo)", "bar"),
        ("$(FOO)", "bar"),
        ("$(nope:dflt)", "dflt"),
        ("$(nope:$(foo))", "bar"),
        ("$(nope)", ""),
        ("$$(Memory)", "$$(Memory)"),
        ("$$([TARGET.Memory * 0.9])", "$$([TARGET.Memory * 0.9])"),
        ("$(DOLLAR)(x)", "$(x)"),
        ("x$(foo", "x$(foo"),
        ("$Fp(path)", "/a/b/"),
        ("$Fn(path)", "c.tar"),
        ("$Fx(path)", ".gz"),
        ("$Fnx(path)", "c.tar.gz"),
        ("$Fd(path)", "b/"),
        ("$Fdb(path)", "b"),
        ("$Fdd(path)", "a/b/"),
        ("$Fq(path)", '"/a/b/c.tar.gz"'),
        ("$Fw(path)", "\\a\\b\\c.tar.gz"),
        ("$DIRNAME(path)", "/a/b/"),
        ("$BASENAME(path)", "c.tar.gz"),
        ("$INT(idx,%04d)", "0001"),
        ("$INT(3.7)", "3"),
        ("$REAL(n)", "2"),
        ("$REAL(n,%.2f)", "2.00"),
        ("$SUBSTR(words,1,3)", "ell"),
        ("$SUBSTR(words,-5)", "world"),
        ("$CHOICE(1,a,b,c)", "b"),
        ("$CHOICE(n,lst)", "z"),
        ("$EVAL(n*2)", "undefined"),
        ("$ENV(HOME)", "/root"),
        ("$ENV(NOPE:dd)", "dd"),
        ("$ENV(NOPE)", "UNDEFINED"),
        ("$STRING(quoted)", "text"),
        ("$RANDOM_INTEGER(5,5)", "5"),
        ("$RANDOM_CHOICE(only)", "only"),
    ],
)
def test_macro_expansion(text: str, want: str) -> None:
    got = expand(
        text,
        foo="bar",
        path="/a/b/c.tar.gz",
        idx="$(Process)+1",
        n="2",
        lst="x,y,z",
        words="hello world",
        quoted='"text"',
    )
    assert got == want


def test_expansion_loop_is_an_error() -> None:
    with pytest.raises(SubmitError, match="does not terminate"):
        expand("$(a)", a="$(b)", b="$(a)")


def test_self_reference_and_lazy_expansion(tmp_path: Path) -> None:
    desc = SubmitDescription.from_text(
        "opts = -a\nopts = $(opts) -b\nexecutable = /bin/true\narguments = $(opts) $(late)\n"
        "late = z\nqueue\n",
        cwd=str(tmp_path),
    )
    (job,) = desc.jobs(1, owner="u", qdate=0)
    assert job.ad["Args"] == "-a -b z"


def test_conditionals(tmp_path: Path) -> None:
    text = (
        "executable = /bin/true\n"
        "if defined nope\n arguments = a\nelif version >= 8.0\n arguments = b\nelse\n"
        " arguments = c\nendif\nif ! $(nope:false)\n +X = 1\nendif\nqueue\n"
    )
    (job,) = SubmitDescription.from_text(text, cwd=str(tmp_path)).jobs(1, owner="u", qdate=0)
    assert job.ad["Args"] == "b"
    assert job.ad["X"] == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("if foo\nendif\n", "not a conditional"),
        ("if 3 > 2\nendif\n", "complex conditionals"),
        ("if true\n", "endif"),
        ("endif\n", "without matching if"),
        ("this is not a command\n", "expected 'name = value'"),
        ("a-b = 1\n", "invalid submit command name"),
        ("include : /nonexistent/file\n", "cannot read include file"),
        ("queue x from (\n a\n", "closing brace"),
    ],
)
def test_parse_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "job.sub"
    path.write_text("executable = /bin/true\n" + text)
    with pytest.raises(SubmitError, match=message) as info:
        SubmitDescription.from_file(path)
    assert info.value.path == str(path)
    assert info.value.line >= 2


def test_include_file_and_command(tmp_path: Path) -> None:
    (tmp_path / "part.inc").write_text("arguments = from_include\n")
    text = "executable = /bin/true\ninclude : part.inc\ninclude : echo '+Cmdline = 7' |\nqueue\n"
    (job,) = SubmitDescription.from_text(text, cwd=str(tmp_path)).jobs(1, owner="u", qdate=0)
    assert job.ad["Args"] == "from_include"
    assert job.ad["Cmdline"] == 7


def test_queue_in_include_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "q.inc").write_text("queue\n")
    with pytest.raises(SubmitError, match="not allowed in include"):
        SubmitDescription.from_text("include : q.inc\n", cwd=str(tmp_path))


@pytest.mark.parametrize(
    ("args", "count", "variables", "mode", "items"),
    [
        ("", 1, (), ForEach.NOT, ()),
        ("5", 5, (), ForEach.NOT, ()),
        ("1+1", 2, (), ForEach.NOT, ()),
        ("in (a, b c)", 1, (), ForEach.IN, ("a", "b", "c")),
        ("2 x in a b", 2, ("x",), ForEach.IN, ("a", "b")),
        ("a, b from (1 2)", 1, ("a", "b"), ForEach.FROM, ("1 2",)),
        ("f matching files *.dat", 1, ("f",), ForEach.MATCHING_FILES, ("*.dat",)),
        ("var1 in (q)", 1, ("var1",), ForEach.IN, ("q",)),
    ],
)
def test_parse_queue_args(
    args: str, count: int, variables: tuple[str, ...], mode: ForEach, items: tuple[str, ...]
) -> None:
    parsed = parse_queue_args(args, None)
    assert (parsed.count, parsed.variables, parsed.mode, parsed.items) == (
        count,
        variables,
        mode,
        items,
    )


def test_queue_slice_and_errors() -> None:
    parsed = parse_queue_args("in [1::2] (a b c d e)", None)
    assert parsed.slice == Slice(1, None, 2)
    assert [i for i in range(5) if parsed.slice.selected(i, 5)] == [1, 3]
    for bad in ("x y z", "-1", "in [1:x] (a)"):
        with pytest.raises(SubmitError):
            parse_queue_args(bad, None)


def test_split_item() -> None:
    assert split_item("x y z", 2) == ["x", "y z"]
    assert split_item("x, y", 2) == ["x", "y"]
    assert split_item("x", 3) == ["x", "", ""]
    assert split_item("a\x1f b \x1fc", 3) == ["a", "b", "c"]


def test_several_queue_statements_number_procs_across_them(tmp_path: Path) -> None:
    text = "executable = /bin/true\narguments = a\nqueue 2\narguments = b\nqueue in (x, y)\n"
    jobs = SubmitDescription.from_text(text, cwd=str(tmp_path)).jobs(7, owner="u", qdate=0)
    assert [(j.proc_id, j.ad["Args"]) for j in jobs] == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    assert {j.ad["ClusterId"] for j in jobs} == {7}


@pytest.mark.parametrize(
    ("text", "v2"),
    [
        ("\"a 'b c' d\"", "a b' 'c d"),
        ('"a ""q"" \'\'"', "a \"q\" ''"),
        ("plain   words", "plain words"),
    ],
)
def test_arguments_canonical_form(text: str, v2: str) -> None:
    assert join_v2(list(parse_args_v1_wacked_or_v2_quoted(text).words)) == v2


def test_arguments_errors() -> None:
    with pytest.raises(SubmitError, match="unescaped double-quote"):
        parse_args_v1_wacked_or_v2_quoted('a "b')
    with pytest.raises(SubmitError, match="Unexpected characters"):
        parse_args_v1_wacked_or_v2_quoted('"a" b')
    with pytest.raises(SubmitError, match="Unbalanced quote"):
        parse_args_v1_wacked_or_v2_quoted('"a \'b"')


def test_environment_v1_and_v2() -> None:
    env = Environment()
    env.merge_v1_raw_or_v2_quoted("B=2;A=one two;C=")
    assert env.v2_raw() == "A=one' 'two B=2 C="
    env2 = Environment()
    env2.merge_v1_raw_or_v2_quoted('"X=\'a b\' Y=""q"""')
    assert env2.v2_raw() == "X=a' 'b Y=\"q\""
    with pytest.raises(SubmitError, match="Missing '='"):
        Environment().merge_v1_raw_or_v2_quoted('"A=1 B"')
