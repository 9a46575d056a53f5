"""The ARC GAHP (`htgrid gahp arc`): HTCondor's ARC CE GAHP protocol over ARC CE's REST
interface (`server`), authenticated with an X.509 proxy or a bearer token.
"""
