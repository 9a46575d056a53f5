"""`htgrid q -grid`: condor_q -grid's columns, the last word of GridJobId as the remote id."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.cli._q import _grid_view


def test_grid_view_shows_instance_id_and_state(capsys: pytest.CaptureFixture[str]) -> None:
    vm = ClassAd(
        {
            "ClusterId": 7,
            "ProcId": 0,
            "Owner": "alice",
            "GridJobStatus": "running",
            "GridResource": "ec2 https://ec2.us-east-1.amazonaws.com",
            "GridJobId": "ec2 https://ec2.us-east-1.amazonaws.com 5f0c-tok i-0abc123",
        }
    )
    starting = ClassAd({"ClusterId": 7, "ProcId": 1, "Owner": "alice", "GridResource": "x y"})
    _grid_view([vm, starting], rich=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "OWNER", "STATUS", "GRID->MANAGER", "HOST", "GRID_JOB_ID"]
    assert lines[1].split() == [
        "7.0",
        "alice",
        "running",
        "ec2",
        "https://ec2.us-east-1.amazonaws.com",
        "i-0abc123",
    ]
    assert lines[2].split() == ["7.1", "alice", "x", "y"]
