"""Conformance: htgrid.submit against HTCondor 24.0's own job-ad generation.

Every case of cases/*.subs goes through `htcondor.Submit(...).jobs()` from the
htcondor==24.0.24 wheel (in its own venv, see oracle24.sh) and through htgrid;
the ads are compared attribute by attribute in old ClassAd syntax. The 24.0
bindings honour only the first queue statement, so only those procs are
compared. Deliberate differences are listed in DIFFERENCES.md and in KNOWN.

Run `python tests/submit/test_conformance.py` for the numbers.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from htgrid.submit import SubmitConfig, SubmitDescription, SubmitError

HERE = Path(__file__).resolve().parent
ORACLE_PYTHON = HERE.parent.parent / ".venv-oracle24" / "bin" / "python"
CLUSTER, QDATE, OWNER = 123, 1_700_000_000, "alice"

# Attributes that differ by design (see DIFFERENCES.md).
ALWAYS_SKIPPED = {"condorversion", "condorplatform"}
# case name -> attribute names (lower case) that differ by design
KNOWN: dict[str, set[str]] = {
    # an empty line in a `from` file: the 24.0 bindings keep the previous row's values
    "queue_from_file.sub": {"args"},
    # ec2_iam_profile_name: HTCondor's test is the wrong way round (DIFFERENCES.md)
    "grid_ec2_iam_name.sub": {"ec2iamprofilename"},
    "grid_ec2_iam_both.sub": {"ec2iamprofilename"},
}


def load_cases(path: Path) -> list[tuple[str, str]]:
    """Split a `==name` file into (name, text) cases."""
    cases: list[tuple[str, str]] = []
    name: str | None = None
    lines: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("=="):
            if name is not None:
                cases.append((name, "\n".join(lines).strip() + "\n"))
            name, lines = line[2:].strip(), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        cases.append((name, "\n".join(lines).strip() + "\n"))
    return cases


ALL_CASES = [case for file in sorted((HERE / "cases").glob("*.subs")) for case in load_cases(file)]


def make_workspace(root: Path) -> None:
    """The files the cases refer to."""
    exe = root / "basic.cmd"
    exe.write_text("#!/bin/sh\necho $*\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    for sub in ("70", "216", "240"):
        (root / "Multilevel_Thesis_WheatData" / sub).mkdir(parents=True, exist_ok=True)
    for name in ("data1", "data2", "other"):
        (root / name).mkdir(exist_ok=True)
    files = {
        "x.dat": "x" * 3000,
        "y.dat": "y",
        "in1.txt": "1" * 5000,
        "in2.txt": "2",
        "Hello.class": "c" * 2048,
        "lib.jar": "j",
        "items.txt": "# header\n10 20\n30, 40\n\n50\n",
        "common.inc": '+FromInclude = "yes"\nrequest_memory = 100\n',
        "access.key": "a",
        "secret.key": "s",
        "azure.auth": "z",
        "dummy.qcow2": "q",
        "dummy2.qcow2": "q",
    }
    for name, text in files.items():
        (root / name).write_text(text)


@dataclass
class CaseResult:
    """The comparison of one case."""

    name: str
    compared: int = 0
    agreed: int = 0
    mismatches: list[str] = field(default_factory=list)
    note: str = ""


def _oracle(cases: list[dict[str, Any]]) -> dict[str, Any]:
    done = subprocess.run(
        [str(ORACLE_PYTHON), str(HERE / "_oracle_runner.py")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _htgrid_attrs(ad: Any) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for line in ad.printOld().splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            attrs[name] = value
    return attrs


def run_conformance(workdir: Path) -> list[CaseResult]:
    """Run every case through both implementations and compare."""
    make_workspace(workdir)
    requests = []
    for name, text in ALL_CASES:
        path = workdir / name
        path.write_text(text)
        requests.append(
            {
                "text": f"SUBMIT_FILE = {path}\n{text}",
                "cwd": str(workdir),
                "cluster": CLUSTER,
                "qdate": QDATE,
                "owner": OWNER,
            }
        )
    oracle = _oracle(requests)
    config = SubmitConfig(filesystem_domain=oracle["hostname"], submit_method=2)
    results = []
    for (name, _text), expected in zip(ALL_CASES, oracle["results"], strict=True):
        result = CaseResult(name)
        results.append(result)
        try:
            desc = SubmitDescription.from_file(
                workdir / name, cwd=str(workdir), env={"HOME": os.environ.get("HOME", "")}
            )
            jobs = desc.jobs(
                CLUSTER, owner=OWNER, qdate=QDATE, submit_dir=str(workdir), config=config
            )
        except SubmitError as exc:
            if "error" in expected:
                result.note = "both rejected"
                result.compared = result.agreed = 1
            else:
                result.mismatches.append(f"htgrid rejected: {exc}")
            continue
        if "error" in expected:
            result.mismatches.append(f"oracle rejected: {expected['error']}")
            continue
        procs = expected["procs"]
        first = [job for job in jobs if job.proc_id < len(procs)]
        if len(first) != len(procs):
            result.mismatches.append(f"proc count {len(first)} != {len(procs)}")
        known = KNOWN.get(name, set())
        for job, want in zip(first, procs, strict=False):
            have = _htgrid_attrs(job.ad)
            want_l = {k.lower(): (k, v) for k, v in want.items()}
            have_l = {k.lower(): (k, v) for k, v in have.items()}
            for key in sorted(set(want_l) | set(have_l)):
                if key in ALWAYS_SKIPPED:
                    continue
                result.compared += 1
                w = want_l.get(key, (key, None))[1]
                h = have_l.get(key, (key, None))[1]
                if w == h or key in known:
                    result.agreed += 1
                else:
                    result.mismatches.append(f"proc {job.proc_id} {key}: oracle={w} htgrid={h}")
    return results


def _oracle_available() -> bool:
    return ORACLE_PYTHON.exists()


@pytest.fixture(scope="module")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> list[CaseResult]:
    if not _oracle_available():
        if os.environ.get("CI") == "true":
            pytest.fail("the HTCondor 24.0 oracle venv is missing: run tests/submit/oracle24.sh")
        pytest.skip("no HTCondor 24.0 oracle venv (.venv-oracle24): run tests/submit/oracle24.sh")
    return run_conformance(tmp_path_factory.mktemp("conformance"))


def test_case_count() -> None:
    assert len(ALL_CASES) >= 50


@pytest.mark.parametrize("name", [name for name, _ in ALL_CASES])
def test_case_agrees(conformance: list[CaseResult], name: str) -> None:
    result = next(r for r in conformance if r.name == name)
    assert not result.mismatches, "\n".join(result.mismatches)


def main() -> None:
    """Print the conformance numbers."""
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "htgrid-conformance"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    results = run_conformance(workdir)
    compared = sum(r.compared for r in results)
    agreed = sum(r.agreed for r in results)
    for result in results:
        status = "ok" if not result.mismatches else f"{len(result.mismatches)} mismatches"
        print(f"{result.name:40} {result.agreed}/{result.compared} {status} {result.note}")
        for line in result.mismatches[:12]:
            print("    ", line)
    clean = sum(1 for r in results if not r.mismatches)
    print(f"\n{len(results)} files, {clean} agree fully; {agreed}/{compared} attributes agree")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import conftest  # noqa: F401

    main()
