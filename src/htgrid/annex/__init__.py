"""The annex: cloud instances that join the pool for a while and always stop spending.

    htgrid annex setup --region us-east-1          # once per account and region (admin)
    htgrid annex create NAME --count 4 --lifetime 2h --image-ids ami-...
    htgrid submit -annex NAME job.sub
    htgrid annex status NAME | add NAME --count 2 | extend NAME --lifetime 1h | shutdown NAME

The lease is enforced in the cloud (`lease_function`, an AWS Lambda function on an
EventBridge schedule; on Azure `azure_timer`, a function app's timer every minute, and
`azure_runbook`, an Automation runbook on a schedule at the lease's end) and installed
before any instance is requested; each instance
also stops itself when idle and at the lease's end (`node`). `_aws` makes the cloud
calls (`_azure` Azure's), `_service` adds the pool's side (the annex's token, its ads), `_setup` the
administrator's one-time step, `_boot` the instances' boot script.
"""

from __future__ import annotations

from htgrid.annex._ads import ANNEX_TYPE, PRICES, annex_ad, spend
from htgrid.annex._aws import AwsAnnexes, config_parameter
from htgrid.annex._azure import AzureAnnexes
from htgrid.annex._azure_setup import azure_setup, azure_user_role, runbook_source
from htgrid.annex._boot import boot_script, settings_of
from htgrid.annex._errors import (
    AnnexCloudError,
    AnnexError,
    AnnexNotFound,
    AnnexUsageError,
    SetupMissing,
)
from htgrid.annex._service import Annexes, Created, start_expression
from htgrid.annex._setup import (
    FLEET_ROLE,
    FUNCTION_NAME,
    INSTANCE_POLICY,
    LEASE_ROLE,
    instance_policy,
    lease_function_zip,
    setup,
    user_policy,
)
from htgrid.annex._spec import (
    DEFAULT_IDLE,
    AnnexSpec,
    Cloud,
    CloudAnnex,
    Instance,
    annex_identity,
    check_name,
    lease_parameter,
    node_hostname,
    parse_duration,
    parse_expiry,
    parse_tags,
    token_parameter,
)

__all__ = [
    "ANNEX_TYPE",
    "DEFAULT_IDLE",
    "FLEET_ROLE",
    "FUNCTION_NAME",
    "INSTANCE_POLICY",
    "LEASE_ROLE",
    "PRICES",
    "AnnexCloudError",
    "AnnexError",
    "AnnexNotFound",
    "AnnexSpec",
    "AnnexUsageError",
    "Annexes",
    "AwsAnnexes",
    "AzureAnnexes",
    "Cloud",
    "CloudAnnex",
    "Created",
    "Instance",
    "SetupMissing",
    "annex_ad",
    "annex_identity",
    "azure_setup",
    "azure_user_role",
    "boot_script",
    "check_name",
    "config_parameter",
    "instance_policy",
    "lease_function_zip",
    "lease_parameter",
    "node_hostname",
    "parse_duration",
    "parse_expiry",
    "parse_tags",
    "runbook_source",
    "settings_of",
    "setup",
    "spend",
    "start_expression",
    "token_parameter",
    "user_policy",
]
