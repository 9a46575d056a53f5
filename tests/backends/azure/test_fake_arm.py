"""The fake ARM itself, where the grid manager's tests lean on how Azure behaves."""

from __future__ import annotations

from pathlib import Path

from ._arm_ops import Operations


def test_an_operation_nobody_polls_still_finishes() -> None:
    """A GAHP killed in the middle of a create stops polling; Azure finishes the VM anyway
    (the grid manager's kill -9 tests then find it running, not `creating` for ever)."""
    ended: list[str] = []
    ops = Operations(polls=3, settle_after=3600)
    ops.start("base", "/vm/a", lambda: ended.append("a"))
    ops.settle()
    assert ended == []  # still running
    ops.settle_after = 0
    ops.settle()
    assert ended == ["a"]
    ops.settle()
    assert ended == ["a"]  # once


def test_a_polled_operation_finishes_after_its_polls_once() -> None:
    ended: list[str] = []
    ops = Operations(polls=1, settle_after=3600)
    op_id, _ = ops.start("base", "/vm/b", lambda: ended.append("b"))
    assert ops.status(op_id)[2]["status"] == "InProgress"
    assert ops.status(op_id)[2]["status"] == "Succeeded"
    ops.settle_after = 0
    ops.settle()
    assert ops.status(op_id)[2]["status"] == "Succeeded"
    assert ended == ["b"]


def test_automation_refuses_what_azure_refuses(tmp_path: Path) -> None:
    """A schedule under 5 minutes ahead, a job schedule for a runbook not published, and a
    job schedule PUT twice (they are immutable) fail with ARM's error bodies."""
    import json
    import ssl
    import time
    import urllib.error
    import urllib.request

    from .arm_server import CLIENT_ID, CLIENT_SECRET, TENANT, ArmServer

    arm = ArmServer(tmp_path).start()
    context = ssl.create_default_context(cafile=str(arm.ca_file))
    try:
        form = (
            f"grant_type=client_credentials&client_id={CLIENT_ID}&client_secret={CLIENT_SECRET}"
            "&scope=x"
        )
        with urllib.request.urlopen(
            urllib.request.Request(f"{arm.url}/{TENANT}/oauth2/v2.0/token", form.encode()),
            context=context,
        ) as answer:
            token = json.loads(answer.read())["access_token"]

        def put(path: str, body: object) -> tuple[int, dict[str, object]]:
            request = urllib.request.Request(
                f"{arm.url}{arm.group_id('g')}/providers/Microsoft.Automation/"
                f"automationAccounts/a{path}?api-version=2023-11-01",
                json.dumps(body).encode(),
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                method="PUT",
            )
            try:
                with urllib.request.urlopen(request, context=context) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        arm.add_group("g")
        assert put("", {"location": "eastus", "properties": {"sku": {"name": "Basic"}}})[0] == 201
        book = {"location": "eastus", "properties": {"runbookType": "Python3"}}
        assert put("/runbooks/r", book)[0] == 201
        soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        status, body = put(
            "/schedules/s", {"properties": {"startTime": soon, "frequency": "OneTime"}}
        )
        assert status == 400 and "at least 5 minutes" in str(body["error"])
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 900))
        assert (
            put("/schedules/s", {"properties": {"startTime": later, "frequency": "OneTime"}})[0]
            == 201
        )
        job = {"properties": {"schedule": {"name": "s"}, "runbook": {"name": "r"}}}
        status, body = put("/jobSchedules/0b2c", job)
        assert status == 400 and "not published" in str(body["error"])
        arm.store.published["x"] = "print(1)"
        arm.resource("g", "Microsoft.Automation/automationAccounts/a/runbooks/r").body[
            "properties"
        ]["state"] = "Published"
        assert put("/jobSchedules/0b2c", job)[0] == 201
        status, body = put("/jobSchedules/0b2c", job)
        assert status == 409 and body["error"]["code"] == "Conflict"
    finally:
        arm.stop()
