"""GAHP servers, each speaking to one kind of remote system.

They run as separate processes and are reached only through the GAHP protocol; code here
imports only `htgrid.gahp` and `htgrid.classad` (and the standard library).
"""
