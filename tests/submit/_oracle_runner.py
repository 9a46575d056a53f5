"""Run submit texts through the HTCondor 24.0 Python bindings (the oracle).

Executed by the oracle venv's python, never imported by the tests. Reads a JSON
list of cases on stdin: {"text", "cwd", "cluster", "qdate", "owner"}; writes a
JSON list of results: {"procs": [{attr: old-syntax value}]} or {"error": msg}.
"""

import json
import os
import socket
import sys
import warnings

warnings.simplefilter("ignore")
import htcondor  # noqa: E402


def run(case):
    os.chdir(case["cwd"])
    try:
        submit = htcondor.Submit(case["text"])
        procs = []
        for ad in submit.jobs(clusterid=case["cluster"], qdate=case["qdate"], owner=case["owner"]):
            attrs = {}
            for line in ad.printOld().splitlines():
                name, sep, value = line.partition(" = ")
                if sep:
                    attrs[name] = value
            procs.append(attrs)
        return {"procs": procs}
    except Exception as exc:  # the oracle reports every failure the same way
        return {"error": f"{type(exc).__name__}: {exc}"}


def main():
    cases = json.load(sys.stdin)
    out = {"hostname": socket.gethostname(), "results": [run(case) for case in cases]}
    json.dump(out, sys.stdout)


main()
