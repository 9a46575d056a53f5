"""Never two VMs for one job, one DescribeInstances per poll, and errors as the grid manager
needs them: permanent ones with EC2's code for HoldReason, transient ones marked so."""

from __future__ import annotations

import socket
from contextlib import closing
from typing import Any

from ._proxy import Relay
from ._wire import Wire, ec2_gahp_argv
from .conftest import all_instances, start_args


def tagged(aws: Any, token: str) -> list[str]:
    """Ids of the instances carrying this client token tag."""
    return [
        i["InstanceId"]
        for i in all_instances(aws)
        if {"Key": "htcondor:ClientToken", "Value": token} in i.get("Tags", [])
    ]


def test_moto_ignores_client_tokens_so_the_tag_is_needed(aws: Any, ami: str) -> None:
    # Why the GAHP tags and looks up: moto starts a second VM for a repeated ClientToken.
    first = aws.run_instances(ImageId=ami, MinCount=1, MaxCount=1, ClientToken="same")
    second = aws.run_instances(ImageId=ami, MinCount=1, MaxCount=1, ClientToken="same")
    assert first["Instances"][0]["InstanceId"] != second["Instances"][0]["InstanceId"]


def test_a_restarted_gahp_finds_the_instance(
    aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    token = "9a1e1f5c-1b7e-4a55-9c69-000000000001"
    with closing(Wire(ec2_gahp_argv())) as first:
        started = first.call("EC2_VM_START", *start_args(target, ami, token=token))
    assert started[0] == "0"
    vm_id = started[1]

    # A new grid manager, a new GAHP: GridJobId holds only the client token.
    with closing(Wire(ec2_gahp_argv())) as second:
        found = second.call("EC2_VM_STATUS_ALL", *target, "client-token", token)
        assert found[:4] == ["0", vm_id, "running", token]
        # HTCondor's Amazon recovery path simply starts again with the same token.
        again = second.call("EC2_VM_START", *start_args(target, ami, token=token))
        assert again == ["0", vm_id]
    assert tagged(aws, token) == [vm_id]


def test_a_start_cut_short_by_a_crash_is_not_repeated(
    aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    token = "9a1e1f5c-1b7e-4a55-9c69-000000000002"
    crashed = Wire(ec2_gahp_argv())
    crashed.submit("EC2_VM_START", *start_args(target, ami, token=token))
    crashed.process.kill()  # the start may or may not have reached EC2
    crashed.close()
    with closing(Wire(ec2_gahp_argv())) as fresh:
        again = fresh.call("EC2_VM_START", *start_args(target, ami, token=token))
    assert again[0] == "0"
    assert tagged(aws, token) == again[1:]


def test_concurrent_starts_with_one_token_make_one_vm(
    gahp: Wire, aws: Any, ami: str, target: tuple[str, str, str]
) -> None:
    token = "9a1e1f5c-1b7e-4a55-9c69-000000000003"
    ids = [gahp.submit("EC2_VM_START", *start_args(target, ami, token=token)) for _ in range(3)]
    answers = [gahp.result(request_id) for request_id in ids]
    assert answers[0][0] == "0"
    assert answers == [answers[0]] * 3
    assert tagged(aws, token) == answers[0][1:]


def test_status_of_150_vms_is_one_describe_call(
    aws: Any, ami: str, keys: tuple[str, str], relay: Relay
) -> None:
    # 150: past moto's default page of 100, so one call means one page asked for.
    count = 150
    target = (relay.url, *keys)
    with closing(Wire(ec2_gahp_argv())) as gahp:
        submitted = [
            gahp.submit("EC2_VM_START", *start_args(target, ami, token=f"tok-{n:03d}"))
            for n in range(count)
        ]
        started = [gahp.result(request_id)[1] for request_id in submitted]
        assert len(set(started)) == count
        # The client-token lookups of concurrent starts share DescribeInstances calls.
        assert relay.counts["RunInstances"] == count
        assert relay.counts["DescribeInstances"] <= count // 4, relay.counts

        relay.counts.clear()
        before = gahp.request("STATISTICS")
        for _ in range(3):
            fields = gahp.call("EC2_VM_STATUS_ALL", *target)
            assert len(fields) == 1 + 8 * count
            assert {fields[i] for i in range(1, len(fields), 8)} == set(started)
        after = gahp.request("STATISTICS")
    assert relay.counts == {"DescribeInstances": 3}
    # NumDistinctRequests went up by one per poll as well.
    assert int(after[2]) - int(before[2]) == 3


def test_a_bad_ami_is_a_permanent_error_with_ec2s_code(
    gahp: Wire, target: tuple[str, str, str]
) -> None:
    fields = gahp.call("EC2_VM_START", *start_args(target, "ami-00000000000000bad", token="t"))
    assert fields[:2] == ["1", "InvalidAMIID.NotFound"]
    assert fields[2].startswith("InvalidAMIID.NotFound: ")
    assert "transient" not in fields[2]


def test_throttling_is_retried_then_reported_as_transient(
    aws: Any, ami: str, keys: tuple[str, str], relay: Relay
) -> None:
    target = (relay.url, *keys)
    with closing(Wire(ec2_gahp_argv("--max-attempts", "3"))) as gahp:
        relay.fail("RunInstances", "RequestLimitExceeded", "Request limit exceeded.", times=1)
        ok = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-retry"))
        assert ok[0] == "0"  # the second attempt got through
        assert relay.counts["RunInstances"] == 2

        relay.fail("RunInstances", "RequestLimitExceeded", "Request limit exceeded.")
        failed = gahp.call("EC2_VM_START", *start_args(target, ami, token="tok-throttled"))
        stats = gahp.request("STATISTICS")
    assert failed[:2] == ["1", "RequestLimitExceeded"]
    assert failed[2] == "RequestLimitExceeded: Request limit exceeded. (transient, 3 attempts)"
    assert int(stats[3]) == 4  # NumRequestsExceedingLimit: one, then three
    assert tagged(aws, "tok-throttled") == []


def test_server_errors_are_transient(aws: Any, keys: tuple[str, str], relay: Relay) -> None:
    target = (relay.url, *keys)
    relay.fail("DescribeInstances", "InternalError", "An internal error has occurred", status=500)
    with closing(Wire(ec2_gahp_argv("--max-attempts", "1"))) as gahp:
        fields = gahp.call("EC2_VM_STATUS_ALL", *target)
    assert fields == [
        "1",
        "InternalError",
        "InternalError: An internal error has occurred (transient, 1 attempt)",
    ]


def test_an_authentication_failure_keeps_htcondors_401_marker(
    gahp: Wire, keys: tuple[str, str], relay: Relay
) -> None:
    relay.fail("DescribeKeyPairs", "AuthFailure", "AWS was not able to validate", status=401)
    fields = gahp.call("EC2_VM_SERVER_TYPE", relay.url, *keys)
    # ec2resource.cpp looks for "(401)" in the code to hold jobs for bad credentials.
    assert fields[:2] == ["1", "AuthFailure (401)"]
    assert fields[2].startswith("AuthFailure: AWS was not able to validate")


def test_no_answer_means_check_before_starting_again(
    gahp: Wire, ami: str, keys: tuple[str, str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = gahp.call("EC2_VM_START", *start_args((dead, *keys), ami, token="t"))
    # HTCondor's code for "the VM may exist": the grid manager retries the start.
    assert started[:2] == ["1", "NEED_CHECK_VM_START"]
    assert started[2].startswith("E_CURL_IO: ") and "(transient" in started[2]
    status = gahp.call("EC2_VM_STATUS_ALL", dead, *keys)
    assert status[:2] == ["1", "E_CURL_IO"]
    keypair = gahp.call("EC2_VM_CREATE_KEYPAIR", dead, *keys, "k", "/dev/null")
    assert keypair[:2] == ["1", "NEED_CHECK_SSHKEY"]


def test_local_problems(gahp: Wire, ami: str, target: tuple[str, str, str], tmp_path: Any) -> None:
    url, access, secret = target
    missing = str(tmp_path / "missing")
    no_key = gahp.call("EC2_VM_STATUS_ALL", url, access, missing)
    assert no_key[:2] == ["1", "E_FILE_IO"] and missing in no_key[2]
    x509 = gahp.call("EC2_VM_STATUS_ALL", "x509://ec2.example.org/", access, secret)
    assert x509[:2] == ["1", "E_INVALID_SERVICE_URL"]
    no_data = gahp.call("EC2_VM_START", *start_args(target, ami, user_data_file=missing))
    assert no_data[:2] == ["1", "E_FILE_IO"]
    assert no_data[2].startswith("E_FILE_IO: Failed to read userdata file")
    bad_count = gahp.call("EC2_VM_START", *start_args(target, ami, max_count="many"))
    assert bad_count[:2] == ["1", "GAHPERROR"]


def test_credentials_from_the_instance(gahp: Wire, moto_url: str) -> None:
    # FROM INSTANCE: the machine's own credentials (here: the test environment's).
    fields = gahp.call("EC2_VM_STATUS_ALL", moto_url, "FROM INSTANCE", "FROM INSTANCE")
    assert fields == ["0"]
