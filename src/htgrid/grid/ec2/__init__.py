"""The ec2 grid type (`ec2 <service-url>`: one VM per job) through the EC2 GAHP."""

from __future__ import annotations

from htgrid.grid.ec2._ids import Ec2JobId
from htgrid.grid.ec2._job import EC2, Ec2Job, ec2_grid_type
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.grid.ec2._table import Ec2Event, Ec2State

__all__ = [
    "EC2",
    "Ec2Event",
    "Ec2Job",
    "Ec2JobId",
    "Ec2Resource",
    "Ec2State",
    "ec2_grid_type",
]
