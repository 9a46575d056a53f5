"""The condor GAHP: HTCondor's C-GAHP protocol, answered by a remote htgrid pool (`htgrid gahp condor`).

With `grid_resource = condor <schedd> <pool>` each job is a copy queued in another pool's
job queue (HTCondor-C); the grid manager submits, stages, watches and cleans it up through
this server, which talks to that queue's HTTPS API with the pool's tokens. `server` has
the command reference.
"""
