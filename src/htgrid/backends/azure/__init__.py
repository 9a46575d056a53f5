"""The Azure GAHP (`htgrid gahp azure`): HTCondor's Azure GAHP protocol over the Azure SDK.

Needs the optional extra `htgrid[azure]`. `server` has the commands and result lines,
`_expiry` the clean-up Azure enforces without htgrid, `_keyvault` the scale-set secrets
fetched with a managed identity, `_errors` the errors (their one-field form is
`htgrid.gahp.commands.azure.Failure`, which the grid manager reads back).
Nothing is imported here, so `htgrid --help` works without the SDK.
"""
