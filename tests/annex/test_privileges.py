"""The privileges split: after the administrator's `annex setup`, a user holding only the
printed policy creates, extends, shows and shuts down annexes, and cannot set up.

moto checks the actions of a call, not its resources (an Allow scoped to ARNs never
matches there: ../shared/reference/moto-for-annex.md), so the test gives the user the
printed policy's actions on Resource "*": what is checked is that its action list is
enough, and that nothing more is needed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from htgrid.annex import AnnexCloudError, AnnexSpec, AwsAnnexes, setup, user_policy

from .conftest import IMAGE, REGION, annexes, boto


def _star(policy: dict[str, Any]) -> dict[str, Any]:
    statements = [
        {**{k: v for k, v in s.items() if k != "NotResource"}, "Resource": "*"}
        for s in policy["Statement"]
    ]
    return {**policy, "Statement": statements}


@pytest.fixture
def user_keys(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The annex user's own keys, with moto checking every call against its policy."""
    iam = boto("iam")
    account = boto("sts").get_caller_identity()["Account"]  # type: ignore[attr-defined]
    iam.create_user(UserName="annex-user")  # type: ignore[attr-defined]
    iam.put_user_policy(  # type: ignore[attr-defined]
        UserName="annex-user",
        PolicyName="htgrid-annex-user",
        PolicyDocument=json.dumps(_star(user_policy(REGION, account))),
    )
    key = iam.create_access_key(UserName="annex-user")["AccessKey"]  # type: ignore[attr-defined]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    httpx.post(f"{aws}/moto-api/reset-auth", content=b"0", timeout=60).raise_for_status()
    try:
        yield
    finally:
        httpx.post(f"{aws}/moto-api/reset-auth", content=b"inf", timeout=60).raise_for_status()


def test_a_user_with_the_printed_policy_runs_an_annex_and_cannot_set_up(
    user_keys: None, home: Path
) -> None:
    ann = annexes(home)
    made = ann.create(AnnexSpec("u1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    assert len(made.ids) == 2
    fleet = ann.create(AnnexSpec("u2", slots=2, lifetime=3600, image_ids=(IMAGE,)))
    assert fleet.ids[0].startswith("sfr-")
    ann.add("u1", count=1)
    ann.extend("u1", lifetime=7200)
    (u1,) = ann.describe("u1")
    assert len(u1.instances) == 3
    assert sorted(ann.aws.names()) == ["u1", "u2"]
    ann.shutdown("u1")
    ann.shutdown("u2")
    assert ann.aws.names() == []
    # The privileged step is not theirs.
    with pytest.raises(AnnexCloudError, match=r"AccessDenied|403"):
        setup(AwsAnnexes(REGION))
