"""GAHP servers, each speaking to one kind of remote system.

They run as separate processes and are reached only through the GAHP protocol, each
command's lines written with `htgrid.gahp.commands`, as the grid manager reads them. Code
here imports only `htgrid.gahp`, `htgrid.classad`, `htgrid.errors` and the small top-level
helpers (`htgrid._gc`, `htgrid._transport`), and the standard library.
"""
