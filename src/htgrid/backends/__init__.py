"""GAHP servers, each speaking to one kind of remote system.

They run as separate processes and are reached only through the GAHP protocol, each
command's lines written with `htgrid.gahp.commands`, as the grid manager reads them. Code
here imports only `htgrid.gahp`, `htgrid.classad`, `htgrid.errors`, `htgrid.client` (the
client side of htgrid's HTTPS APIs, which the condor GAHP is) and the small top-level
helpers (`htgrid._gc`, `_startup`, `_args`), besides the standard library and the back
ends' own SDKs.
"""
