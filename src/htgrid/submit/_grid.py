"""Job-ad steps for the grid universe: grid_resource and the batch_*, ec2_*, gce_*
and azure_* commands (SubmitHash::SetGridParams).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from htgrid.submit._errors import SubmitError

if TYPE_CHECKING:
    from htgrid.submit._jobad import JobBuilder

__all__ = ["set_grid_params"]

GRID = 9
_USE_INSTANCE_ROLE = "FROM INSTANCE"


def set_grid_params(b: JobBuilder) -> None:
    """SetGridParams: GridResource and the ec2_*/gce_*/azure_*/batch_* commands."""
    if b.universe.number != GRID:
        return
    ad = b.ad
    resource = b.p("grid_resource", "GridResource")
    if resource:
        ad["GridResource"] = resource
        if resource.lower() == "ec2":
            raise SubmitError("EC2 grid jobs require a service URL")
    grid = b.universe.grid_type.lower()
    for key, attr in (
        ("arc_rte", "ArcRte"),
        ("arc_resources", "ArcResources"),
        ("arc_application", "ArcApplication"),
        ("globus_rsl", "GlobusRSL"),
        ("batch_extra_submit_args", "BatchExtraSubmitArgs"),
        ("batch_project", "BatchProject"),
        ("batch_queue", "BatchQueue"),
    ):
        value = b.p(key, attr)
        if value:
            ad[attr] = value
    runtime = b.p("batch_runtime", "BatchRuntime")
    if runtime:
        b.expr("BatchRuntime", runtime)
    for keys, attr in (
        (("ec2_access_key_id", "aws_access_key_id_file"), "EC2AccessKeyId"),
        (("ec2_secret_access_key", "aws_secret_access_key_file"), "EC2SecretAccessKey"),
    ):
        value = b.p(keys[0], attr) or b.p(keys[1], attr)
        if value:
            if value.upper() == _USE_INSTANCE_ROLE:
                ad["EC2AccessKeyId"] = _USE_INSTANCE_ROLE
                ad["EC2SecretAccessKey"] = _USE_INSTANCE_ROLE
            else:
                ad[attr] = b.full_path(value)
    if grid == "ec2":
        for attr, key in (
            ("EC2AccessKeyId", "ec2_access_key_id"),
            ("EC2SecretAccessKey", "ec2_secret_access_key"),
        ):
            if attr not in ad:
                raise SubmitError(f"EC2 jobs require a '{key}' parameter")
    keypair = b.p("ec2_keypair", "EC2KeyPair") or b.p("ec2_keyname", "EC2KeyPair")
    if keypair:
        ad["EC2KeyPair"] = keypair
    keyfile = b.p("ec2_keypair_file", "EC2KeyPairFile") or b.p("ec2_id_rsa_file", "EC2KeyPairFile")
    if keyfile:
        if "EC2KeyPair" in ad:
            b.warnings.append(
                "EC2 job(s) contain both ec2_keypair && ec2_keypair_file, ignoring ec2_keypair_file"
            )
        else:
            ad["EC2KeyPairFile"] = b.full_path(keyfile)
    for key, attr in (
        ("ec2_security_groups", "EC2SecurityGroups"),
        ("ec2_security_ids", "EC2SecurityIDs"),
        ("ec2_ami_id", "EC2AmiID"),
        ("ec2_instance_type", "EC2InstanceType"),
        ("ec2_vpc_subnet", "EC2VpcSubnet"),
        ("ec2_vpc_ip", "EC2VpcIP"),
        ("ec2_elastic_ip", "EC2ElasticIP"),
        ("ec2_availability_zone", "EC2AvailabilityZone"),
    ):
        value = b.p(key, attr)
        if value:
            ad[attr] = value
        elif attr == "EC2AmiID" and grid == "ec2":
            raise SubmitError('EC2 jobs require a "ec2_ami_id" parameter')
    volumes = b.p("ec2_ebs_volumes", "EC2ElasticBlockStorageVolumes")
    if volumes:
        if not all(len(disk.split(":")) == 2 for disk in volumes.strip().split(",")):
            raise SubmitError("'ec2_ebs_volumes' has incorrect format.")
        if "EC2AvailabilityZone" not in ad:
            raise SubmitError("'ec2_ebs_volumes' requires 'ec2_availability_zone'")
        ad["EC2ElasticBlockStorageVolumes"] = volumes
    for key, attr in (
        ("ec2_spot_price", "EC2SpotPrice"),
        ("ec2_block_device_mapping", "EC2BlockDeviceMapping"),
        ("ec2_user_data", "EC2UserData"),
    ):
        value = b.p(key, attr)
        if value:
            ad[attr] = value
    user_data_file = b.p("ec2_user_data_file", "EC2UserDataFile")
    if user_data_file:
        ad["EC2UserDataFile"] = b.full_path(user_data_file)
    arn = b.p("ec2_iam_profile_arn", "EC2IamProfileArn")
    if arn:
        ad["EC2IamProfileArn"] = arn
    name = b.p("ec2_iam_profile_name", "EC2IamProfileName")
    if name:
        # As the manual says: the name alone sets EC2IamProfileName. HTCondor's own
        # condor_submit (24.0 and since) tests the wrong way round: it drops a name given
        # alone and keeps it beside an ARN (tests/submit/DIFFERENCES.md).
        if "EC2IamProfileArn" in ad:
            b.warnings.append(
                "EC2 job(s) contain both ec2_iam_profile_arn and ec2_iam_profile_name; "
                "ignoring ec2_iam_profile_name."
            )
        else:
            ad["EC2IamProfileName"] = name
    _ec2_parameters(b)
    _av_pairs(b, "ec2_tag_names", "EC2TagNames", "ec2_tag_", "EC2Tag", grid)
    _av_pairs(b, "cloud_label_names", "CloudLabelNames", "cloud_label_", "CloudLabel", grid)
    _gce_azure(b, grid)


def _ec2_parameters(b: JobBuilder) -> None:
    names_text = b.p("ec2_parameter_names", "EC2ParameterNames")
    names = [n for n in re.split(r"[,\s]+", names_text or "") if n]
    prefix = "ec2_parameter_"
    for key in b.x.macros.names():
        if key.lower() == "ec2_parameter_names" or not key.lower().startswith(prefix):
            continue
        param = key[len(prefix) :]
        b.ad[f"EC2Parameter_{param}"] = b.x.lookup(key) or ""
        if not any(n.replace(".", "_").lower() == param.lower() for n in names):
            names.append(param)
    if names:
        b.ad["EC2ParameterNames"] = ", ".join(names)


def _av_pairs(
    b: JobBuilder, names_key: str, names_attr: str, prefix: str, attr_prefix: str, grid: str
) -> None:
    text = b.p(names_key, names_attr)
    tags = [t for t in re.split(r"[,\s]+", text or "") if t]
    for key in b.x.macros.names():
        low = key.lower()
        if low.startswith(prefix) and len(key) > len(prefix):
            name = key[len(prefix) :]
        elif low.startswith(attr_prefix.lower()) and len(key) > len(attr_prefix):
            name = key[len(attr_prefix) :]
        else:
            continue
        if not name.lower().startswith("names") and name.lower() not in (t.lower() for t in tags):
            tags.append(name)
    for tag in tags:
        value = b.p(prefix + tag, attr_prefix + tag)
        if value:
            b.ad[attr_prefix + tag] = value
    # HTCondor 24.0 names EC2 instances after the executable, in tags and labels alike
    named = "name" in (t.lower() for t in tags)
    if grid == "ec2" and not named and b.pbool("WantNameTag", None, True)[0]:
        cmd = b.ad.string("Cmd")
        if cmd is not None:
            b.ad[attr_prefix + "Name"] = cmd
    if tags:
        b.ad[names_attr] = ",".join(tags)


def _gce_azure(b: JobBuilder, grid: str) -> None:
    ad = b.ad
    auth = b.p("gce_auth_file", "GceAuthFile")
    if auth:
        ad["GceAuthFile"] = b.full_path(auth)
    for key, attr, required in (
        ("gce_account", "GceAccount", False),
        ("gce_image", "GceImage", True),
        ("gce_machine_type", "GceMachineType", True),
    ):
        value = b.p(key, attr)
        if value:
            ad[attr] = value
        elif required and grid == "gce":
            raise SubmitError(f'GCE jobs require a "{key}" parameter')
    metadata = b.p("gce_metadata", "GceMetadata")
    if metadata:
        ad["GceMetadata"] = ",".join(t.strip() for t in metadata.split(",") if t.strip())
    for key, attr in (("gce_metadata_file", "GceMetadataFile"), ("gce_json_file", "GceJsonFile")):
        value = b.p(key, attr)
        if value:
            ad[attr] = b.full_path(value)
    preemptible, given = b.pbool("gce_preemptible", "GcePreemptible", False)
    if given:
        ad["GcePreemptible"] = preemptible
    azure_auth = b.p("azure_auth_file", "AzureAuthFile")
    if azure_auth:
        ad["AzureAuthFile"] = b.full_path(azure_auth)
    for key, attr in (
        ("azure_image", "AzureImage"),
        ("azure_location", "AzureLocation"),
        ("azure_size", "AzureSize"),
        ("azure_admin_username", "AzureAdminUsername"),
        ("azure_admin_key", "AzureAdminKey"),
    ):
        value = b.p(key, attr)
        if value:
            ad[attr] = value
        elif grid == "azure":
            raise SubmitError(f'Azure jobs require an "{key}" parameter')
