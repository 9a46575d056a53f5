"""The EC2 GAHP: HTCondor's EC2 GAHP protocol, answered with boto3 (`htgrid gahp ec2`).

With `grid_resource = ec2 <service-url>` each job is a virtual machine the grid manager
starts, watches and stops through this server. `server` has the command reference.
boto3 is an optional dependency (`htgrid[ec2]`); nothing here imports it until used.
"""
