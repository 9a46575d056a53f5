"""Version-1 `classad` API probes, run by the HTCondor 24.0 oracle venv and by htgrid.

Executed as a script, never imported by the tests: `python v1_probes.py oracle|htgrid`
imports `classad` (HTCondor 24.0's version-1 module) or `htgrid.classad`, runs every
probe and prints a JSON object: probe name -> canonical result. Each probe is what a
version-1 script does; canonical results compare across the two modules.
"""

import datetime
import io
import json
import sys
import tempfile
import warnings

if sys.argv[1] == "oracle":
    import classad
else:
    import htgrid.classad as classad

_ERRORS = [
    "ClassAdException",
    "ClassAdParseError",
    "ClassAdEvaluationError",
    "ClassAdValueError",
    "ClassAdTypeError",
    "ClassAdOSError",
]
_BUILTINS = [ValueError, SyntaxError, RuntimeError, TypeError, KeyError, OSError, StopIteration]


def canon(value):
    if isinstance(value, classad.ClassAd):
        return ["ad", sorted([k.lower(), repr(value.lookup(k))] for k in value)]
    if isinstance(value, classad.ExprTree):
        return ["expr", repr(value)]
    if isinstance(value, classad.Value):
        return ["value", value.name]
    if isinstance(value, bool | int | float | str) or value is None:
        return [type(value).__name__, value]
    if isinstance(value, list | tuple):
        return ["list", [canon(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted([k, canon(v)] for k, v in value.items())]
    if isinstance(value, datetime.datetime):
        return ["datetime", value.isoformat()]
    return ["other", type(value).__name__]


def raised(err):
    kinds = [name for name in _ERRORS if isinstance(err, getattr(classad, name))]
    kinds += [b.__name__ for b in _BUILTINS if isinstance(err, b)]
    return ["raises", kinds]


def run(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = canon(fn())
        except Exception as err:  # every failure is compared by what it is
            result = raised(err)
    shown = sorted(
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, DeprecationWarning)
    )
    return [result, shown]


def text_file(text):
    f = tempfile.TemporaryFile("w+")  # noqa: SIM115 - left open for the parser, as a script does
    f.write(text)
    f.seek(0)
    return f


OLD = 'MyType = "Job"\nA = 1\nB = "x\\"y"\nReq = A > 0 && B == "q"\n# a comment\nC = b + 1\n'
OLD_ADS = OLD + "\nD = 4\n"
NEW = '[ A = 1; B = "x" ]\n[ C = 2 ]\n'
AD = '[ a = 1; b = a + 1; c = x + 1; s = "str"; l = { 1, b } ]'


def lines_of(text):
    return text.splitlines(True)


def next_two(text):
    f = text_file(text)
    return [classad.parseNext(f), classad.parseNext(f)]


def double(x):
    return x * 2


def plus(a, b):
    return a + b


def with_state(name, state=None):
    return state.eval(name) if state is not None else "no state"


def fails(x):
    raise ValueError("refused " + str(x))


def registered(fn, name=None):
    classad.register(fn, name)
    return True


PROBES = {
    # the parsers
    "parse(str)": lambda: classad.parse(NEW),
    "parse(file)": lambda: classad.parse(text_file(NEW)),
    "parse(bad)": lambda: classad.parse("[ a = ]"),
    "parse(old text)": lambda: classad.parse(OLD),
    "parseOld(str)": lambda: classad.parseOld(OLD),
    "parseOld(file)": lambda: classad.parseOld(text_file(OLD)),
    "parseOld(stdin-like)": lambda: classad.parseOld(io.StringIO(OLD)),
    "parseOld(bad)": lambda: classad.parseOld("A = = 1\n"),
    "parseOld(empty)": lambda: classad.parseOld(""),
    "parseOldAds(str)": lambda: list(classad.parseOldAds(OLD_ADS)),
    "parseOldAds(lines)": lambda: list(classad.parseOldAds(lines_of(OLD_ADS))),
    "parseOldAds(file)": lambda: list(classad.parseOldAds(text_file(OLD_ADS))),
    "parseAds(old)": lambda: list(classad.parseAds(OLD_ADS)),
    "parseAds(new)": lambda: list(classad.parseAds(NEW)),
    "parseAds(old file)": lambda: list(classad.parseAds(text_file(OLD_ADS))),
    "parseAds(new file)": lambda: list(classad.parseAds(text_file(NEW))),
    "parseAds(Parser.Old)": lambda: list(classad.parseAds(OLD_ADS, classad.Parser.Old)),
    "parseNext(str)": lambda: classad.parseNext(OLD_ADS),
    "parseNext(file) twice": lambda: next_two(OLD_ADS),
    "parseNext(new file) twice": lambda: next_two(NEW),
    "parseOne(old)": lambda: classad.parseOne(OLD_ADS),
    "parseOne(new)": lambda: classad.parseOne(NEW),
    "ClassAd(str)": lambda: classad.ClassAd(AD),
    "ClassAd(bad)": lambda: classad.ClassAd("[ a = ]"),
    "ExprTree(bad)": lambda: classad.ExprTree("a +"),
    "quote": lambda: classad.quote('a"b\\c'),
    "unquote": lambda: classad.unquote('"a\\"b"'),
    "unquote(bad)": lambda: classad.unquote("a"),
    "lastError": lambda: classad.lastError(),
    # expressions taken from an ad evaluate there
    "ad[b].eval()": lambda: classad.ClassAd(AD)["b"].eval(),
    "ad.lookup(b).eval()": lambda: classad.ClassAd(AD).lookup("b").eval(),
    "ad.lookup(b).simplify()": lambda: classad.ClassAd(AD).lookup("b").simplify(),
    "ad[l]": lambda: classad.ClassAd(AD)["l"],
    "ad.eval(c)": lambda: classad.ClassAd(AD).eval("c"),
    "ad.eval(missing)": lambda: classad.ClassAd(AD).eval("zzz"),
    "ad.flatten": lambda: classad.ClassAd(AD).flatten(classad.ExprTree("b + x")),
    "ad.externalRefs": lambda: classad.ClassAd(AD).externalRefs(classad.ExprTree("a + z")),
    "ad.internalRefs": lambda: classad.ClassAd(AD).internalRefs(classad.ExprTree("a + z")),
    "ad.printOld": lambda: classad.ClassAd("[ a = 1 ]").printOld(),
    "ad.printJson": lambda: classad.ClassAd("[ a = 1 ]").printJson(),
    # building expressions
    "Literal(int)": lambda: classad.Literal(5),
    "Literal(str)": lambda: classad.Literal('a"b'),
    "Literal(None)": lambda: classad.Literal(None),
    "Literal(float)": lambda: classad.Literal(2.5),
    "Literal(expr)": lambda: classad.Literal(classad.ExprTree("1 + 2")),
    "Literal(unevaluable)": lambda: classad.Literal(classad.ExprTree("a + 1")),
    "Attribute": lambda: classad.Attribute("Foo"),
    "Function": lambda: classad.Function("strcat", "a", 1, classad.Attribute("x")),
    "Function eval": lambda: classad.Function("strcat", "a", 1).eval(),
    "Attribute == 1": lambda: classad.Attribute("Foo") == 1,
    "Attribute != str": lambda: classad.Attribute("Owner") != "alice",
    "Attribute <= Attribute": lambda: classad.Attribute("a") <= classad.Attribute("b"),
    "comparisons": lambda: [
        classad.Attribute("a") < 1,
        classad.Attribute("a") > 1,
        classad.Attribute("a") >= 1,
    ],
    "arithmetic": lambda: [
        classad.Attribute("a") + 1,
        1 + classad.Attribute("a"),
        classad.Attribute("a") - 1,
        3 - classad.Attribute("a"),
        2 * classad.Attribute("a"),
        classad.Attribute("a") / 2,
        classad.Attribute("a") % 2,
    ],
    "bitwise": lambda: [
        classad.Attribute("a") << 2,
        classad.Attribute("a") >> 1,
        classad.Attribute("a") & 1,
        1 | classad.Attribute("a"),
        classad.Attribute("a") ^ 3,
    ],
    "and_ or_ is_ isnt_": lambda: [
        classad.Attribute("a").and_(classad.Attribute("b")),
        classad.Attribute("a").or_(True),
        classad.Attribute("a").is_(classad.Value.Undefined),
        classad.Attribute("a").isnt_(1),
    ],
    "built and evaluated": lambda: [
        (classad.ExprTree("a + b") * 2).eval(classad.ClassAd({"a": 1, "b": 2})),
        (classad.ExprTree("a") - classad.ExprTree("b - c")).eval(
            classad.ClassAd({"a": 10, "b": 5, "c": 3})
        ),
        classad.ExprTree("a")
        .and_(classad.ExprTree("b || c"))
        .eval(classad.ClassAd({"a": True, "b": False, "c": True})),
        (classad.Attribute("Memory") >= 1024).eval(classad.ClassAd({"Memory": 2048})),
    ],
    "built from an ad evaluates there": lambda: (classad.ClassAd(AD)["b"] + 1).eval(),
    "bool(built)": lambda: [
        bool(classad.Attribute("a") < 1),
        bool(classad.ExprTree("2") * 3 > 5),
        bool(classad.ExprTree("2") * 3 <= 5),
    ],
    "bool(built error)": lambda: bool(classad.ExprTree("1") + "x" > 0),
    "sameAs": lambda: [
        classad.ExprTree("a + 1").sameAs(classad.ExprTree("a+1")),
        classad.ExprTree("a + 1").sameAs(classad.ExprTree("(a+1)")),
        classad.ExprTree("A").sameAs(classad.ExprTree("a")),
    ],
    "_get": lambda: classad.ExprTree("x")._get("a"),
    "getitem(list)": lambda: [classad.ExprTree("{1, a, 3}")[0], classad.ExprTree("{1, 2}")[-1]],
    "getitem(list, expression item)": lambda: classad.ExprTree("{1, a}")[1],
    "getitem(string)": lambda: classad.ExprTree('strcat("ab", "c")')[1],
    "getitem(evaluated list)": lambda: classad.ExprTree('split("a b c")')[2],
    "getitem(ad)": lambda: classad.ExprTree("[ a = 1 ]")["a"],
    "int()": lambda: [int(classad.ExprTree("2.7")), int(classad.ExprTree('"42"'))],
    "float()": lambda: [float(classad.ExprTree("1 + 2")), float(classad.ExprTree('"1.5"'))],
    "int(undefined)": lambda: int(classad.ExprTree("undefined")),
    "int(bad string)": lambda: int(classad.ExprTree('"4x"')),
    "Value as a condition": lambda: [bool(classad.Value.Undefined)],
    # Python functions in expressions
    "register(name)": lambda: [
        registered(double, "dbl"),
        classad.ExprTree("dbl(3)").eval(),
        classad.ExprTree('dbl("ab")').eval(),
    ],
    "register(own name)": lambda: [registered(plus), classad.ExprTree("plus(3, 4)").eval()],
    "register: expression arguments": lambda: [
        registered(plus),
        classad.ExprTree("plus(a, 1)").eval(classad.ClassAd({"a": 41})),
    ],
    "register: state": lambda: [
        registered(with_state),
        classad.ExprTree('with_state("x")').eval(classad.ClassAd({"x": 7})),
    ],
    "register: its exception": lambda: [registered(fails), classad.ExprTree("fails(1)").eval()],
    "register: wrong arity": lambda: [registered(plus), classad.ExprTree("plus(1)").eval()],
    "register: again": lambda: [
        registered(double, "twice"),
        registered(plus, "twice"),
        classad.ExprTree("twice(1, 2)").eval(),
    ],
    "registerLibrary": lambda: classad.registerLibrary("/nonexistent/libfoo.so"),
    # the exceptions
    "exception classes": lambda: [
        [b.__name__ for b in _BUILTINS if issubclass(getattr(classad, name), b)] for name in _ERRORS
    ],
    "iterator names": lambda: [
        hasattr(classad, name)
        for name in ("OldClassAdIterator", "ClassAdStringIterator", "ClassAdFileIterator")
    ],
}

if __name__ == "__main__":
    json.dump({name: run(fn) for name, fn in PROBES.items()}, sys.stdout)
