"""Job-ad steps for grid and VM jobs, containers, credentials, job policy,
accounting, deferral and the simple one-to-one commands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from htgrid.submit import _classad, _exprs
from htgrid.submit._errors import SubmitError
from htgrid.submit._tables import SIMPLE_COMMANDS, As, Simple
from htgrid.submit._values import string_is_bool, string_is_long

if TYPE_CHECKING:
    from htgrid.submit._jobad import JobBuilder

__all__ = [
    "parse_bytes",
    "set_concurrency_and_accounting",
    "set_container_image",
    "set_credentials",
    "set_deferral",
    "set_policy",
    "set_simple",
    "set_vm_params",
]

GRID, VM = 9, 13


def parse_bytes(text: str, base: int) -> tuple[int, bool] | None:
    """parse_int64_bytes: a number with an optional K/M/G/T[B] suffix, in units of `base`.

    Returns (value, had a unit) or None when `text` is not such a number.
    """
    match = re.match(r"\s*([+-]?\d*)(?:\.(\d*))?\s*([kKmMgGtT]?)([bB]?)\s*\Z", text)
    if not match or (not match.group(1).lstrip("+-") and not (match.group(2) or "")):
        return None
    if not match.group(1).lstrip("+-") and match.group(2) is None:
        return None
    whole = int(match.group(1)) if match.group(1).lstrip("+-") else 0
    digits = (match.group(2) or "")[:3]
    fract = sum(int(d) / 10 ** (i + 1) for i, d in enumerate(digits))
    unit = match.group(3).lower()
    if match.group(4) and not unit:
        return None
    mult = {"": base, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[unit]
    value = int((whole + fract) * mult + base - 1) // base
    return value, bool(unit)


def set_vm_params(b: JobBuilder) -> None:
    """SetVMParams: the vm_* commands of the vm universe."""
    if b.universe.number != VM:
        return
    ad = b.ad
    vm_type = (b.p("vm_type", "JobVMType") or "").lower()
    if not vm_type:
        raise SubmitError("'vm_type' cannot be found.\nPlease specify 'vm_type' for vm universe.")
    ad["JobVMType"] = vm_type
    ad["JobVMCheckpoint"] = b.pbool("vm_checkpoint", "JobVMCheckpoint", False)[0]
    networking = b.pbool("vm_networking", "JobVMNetworking", False)[0]
    ad["JobVMNetworking"] = networking
    if networking:
        kind = b.p("vm_networking_type", "JobVMNetworkingType")
        if kind:
            ad["JobVMNetworkingType"] = kind
    ad["JobVMVNCConsole"] = b.pbool("vm_vnc", "JobVMVNCConsole", False)[0]
    memory = b.p("vm_memory", "JobVMMemory")
    if memory is None:
        raise SubmitError(
            "vm_memory cannot be found.\nPlease specify vm_memory for vm universe in your submit description file."
        )
    parsed = parse_bytes(memory, 1024 * 1024)
    if parsed is None or parsed[0] <= 0:
        raise SubmitError("vm_memory is incorrectly specified")
    ad["JobVMMemory"] = parsed[0]
    b.set_exe_size(parsed[0] * 1024)
    ad["ExecutableSize"] = b.exe_size_kb
    vcpus = b.p("vm_vcpus", "JobVM_VCPUS")
    if vcpus:
        match = re.match(r"\s*[+-]?\d+", vcpus)
        ad["JobVM_VCPUS"] = max(int(match.group()) if match else 0, 1)
    else:
        ad["JobVM_VCPUS"] = 1
    mac = b.p("vm_macaddr", "JobVM_MACADDR")
    if mac:
        ad["JobVM_MACADDR"] = mac
    no_output, given = b.pbool("vm_no_output_vm", None, False)
    if given:
        ad["VMPARAM_No_Output_VM"] = no_output
    if vm_type == "xen":
        kernel = b.p("xen_kernel", "VMPARAM_Xen_Kernel")
        if not kernel:
            raise SubmitError("'xen_kernel' cannot be found.")
        ad["VMPARAM_Xen_Kernel"] = kernel
        real_kernel = kernel.lower() not in ("included", "vmx")
        if kernel.lower() == "vmx":
            ad["JobVMHardwareVT"] = True
        initrd = b.p("xen_initrd")
        if initrd:
            if not real_kernel:
                raise SubmitError("To use xen_initrd, xen_kernel should be a real kernel file.")
            ad["VMPARAM_Xen_Initrd"] = initrd
        if real_kernel:
            root = b.p("xen_root")
            if not root:
                raise SubmitError("'xen_root' cannot be found.")
            ad["VMPARAM_Xen_Root"] = root
        params = b.p("xen_kernel_params", "VMPARAM_Xen_Kernel_Params")
        if params:
            ad["VMPARAM_Xen_Kernel_Params"] = params.strip("\"'")
    if vm_type in ("xen", "kvm"):
        disk = b.p("vm_disk")
        if not disk:
            raise SubmitError("'<vm>_disk' cannot be found.")
        for one in disk.strip(" ").split(","):
            if not 3 <= len(one.split(":")) <= 4:
                raise SubmitError("'vm_disk' has incorrect format.")
        ad["VMPARAM_vm_Disk"] = disk
    elif vm_type == "vmware":
        raise SubmitError("A vm_type of 'vmware' is no longer supported")


def set_container_image(b: JobBuilder, has_docker_image: bool) -> None:
    """The container_image command of the container universe."""
    image_text = b.p("container_image", "ContainerImage")
    if image_text:
        image = image_text.strip()
        if len(image) >= 2 and image[0] == image[-1] == '"':
            image = image[1:-1]
        if not image or image.startswith(("instance://", "library://", "shub://")):
            raise SubmitError(f"'{image_text}' is not a valid container image")
        b.ad["ContainerImage"] = image
        if image.startswith("docker:"):
            b.ad["WantDockerImage"] = True
        elif image.endswith(".sif"):
            b.ad["WantSIF"] = True
        else:
            b.ad["WantSandboxImage"] = True
    elif not has_docker_image:
        raise SubmitError("container jobs require a container_image or docker_image")


def set_credentials(b: JobBuilder) -> None:
    """SetGSICredentials: x509userproxy, delegation lifetime and SciTokens."""
    proxy = b.p("x509userproxy")
    use_proxy = b.pbool("use_x509userproxy", None, False)[0]
    if proxy is None and use_proxy:
        # get_x509_proxy_filename: X509_USER_PROXY, else GSI's /tmp/x509up_u<uid>.
        proxy = (
            b.env.get("X509_USER_PROXY")
            or b.config.x509_user_proxy
            or f"/tmp/x509up_u{os.getuid()}"
        )
    if proxy is not None:
        b.ad["x509userproxy"] = b.full_path(proxy)
    lifetime = b.p("delegate_job_gsi_credentials_lifetime", "DelegateJobGSICredentialsLifetime")
    if lifetime:
        if not re.fullmatch(r"[+-]?\d+", lifetime):
            raise SubmitError(
                f"invalid integer setting delegate_job_gsi_credentials_lifetime = {lifetime}"
            )
        b.ad["DelegateJobGSICredentialsLifetime"] = int(lifetime)
    use_tokens_text = b.p("use_scitokens", "use_scitoken")
    token_file = b.p("scitokens_file", "ScitokensFile")
    use_tokens = token_file is not None
    if use_tokens_text is not None:
        if use_tokens_text.lower() == "auto":
            use_tokens = token_file is not None or bool(b.env.get("BEARER_TOKEN_FILE"))
        else:
            flag = string_is_bool(use_tokens_text)
            if flag is None:
                raise SubmitError("use_scitokens error. Value should be true, false, or auto.")
            use_tokens = flag
    if use_tokens:
        token = token_file or b.env.get("BEARER_TOKEN_FILE")
        if not token:
            raise SubmitError("No Scitokens filename specified.")
        b.ad["ScitokensFile"] = b.full_path(token)
    services = b.p("use_oauth_services", "use_oauth_service")
    if services:
        _oauth(b, services)
    _myproxy(b)


#: The MyProxy commands HTCondor's condor_submit had (until 9.12): strings, then expressions.
MYPROXY_STRINGS = ("MyProxyHost", "MyProxyServerDN", "MyProxyCredentialName")
MYPROXY_EXPRS = ("MyProxyRefreshThreshold", "MyProxyNewProxyLifetime")


def _myproxy(b: JobBuilder) -> None:
    """Where the job's proxy is renewed from, as condor_submit set it. MyProxyPassword
    goes to the schedd, which keeps it out of the queue (htgrid.pool._myproxy)."""
    for name in MYPROXY_STRINGS:
        value = b.p(name)
        if value is not None:
            b.ad[name] = value
    for name in MYPROXY_EXPRS:
        value = b.p(name)
        if value is not None:
            b.expr(name, value)
    password = b.p("MyProxyPassword")
    if password is not None:
        b.ad["MyProxyPassword"] = password


def _oauth(b: JobBuilder, services: str) -> None:
    enabled = {s for s in re.split(r"[,\s]+", services) if s}
    with_handles: set[str] = set()
    names: set[str] = set()
    for key in b.x.macros.names():
        if key.startswith("+") or key.lower().startswith("my."):
            continue
        match = re.search(r"_oauth_(permissions|resource|options)", key, re.I)
        if not match or key[: match.start()] not in enabled:
            continue
        service = key[: match.start()]
        if match.end() < len(key):
            with_handles.add(service)
            service += "*" + key[match.end() + 1 :]
        names.add(service)
    names.update(s for s in enabled if s not in with_handles)
    b.ad["OAuthServicesNeeded"] = ",".join(sorted(names))


def set_policy(b: JobBuilder) -> None:
    """Periodic and on-exit expressions, leave_in_queue and job retries."""
    for key, attr in (
        ("periodic_hold", "PeriodicHold"),
        ("periodic_hold_reason", "PeriodicHoldReason"),
        ("periodic_hold_subcode", "PeriodicHoldSubCode"),
        ("periodic_release", "PeriodicRelease"),
        ("periodic_remove", "PeriodicRemove"),
        ("periodic_vacate", "PeriodicVacate"),
        ("on_exit_hold_reason", "OnExitHoldReason"),
        ("on_exit_hold_subcode", "OnExitHoldSubCode"),
    ):
        value = b.p(key, attr)
        if value:
            b.expr(attr, value)
    leave = b.p("leave_in_queue", "LeaveJobInQueue")
    if leave:
        b.expr("LeaveJobInQueue", leave)
    else:
        b.ad["LeaveJobInQueue"] = False
    _retries(b)


def _retries(b: JobBuilder) -> None:
    remove = b.p("on_exit_remove", "OnExitRemove")
    hold = b.p("on_exit_hold", "OnExitHold")
    retries = b.plong("max_retries", "JobMaxRetries")
    success = b.plong("success_exit_code", "JobSuccessExitCode")
    until = b.p("retry_until")
    if retries is None and success is None and until is None:
        if remove:
            b.expr("OnExitRemove", remove)
        if hold:
            b.expr("OnExitHold", hold)
        return
    if until is not None:
        if not _classad.parses(until):
            raise SubmitError(
                f"retry_until={until} is invalid, it must be an integer or boolean expression."
            )
        code = string_is_long(until) if not _exprs.references(until) else None
        until = f"ExitCode =?= {code}" if code is not None else _exprs.wrap_for(until, "||")
    b.ad["JobMaxRetries"] = retries if retries is not None else 2
    if hold:
        b.expr("OnExitHold", hold)
    else:
        b.ad["OnExitHold"] = False
    check = "0"
    if success is not None:
        b.ad["JobSuccessExitCode"] = success
        check = "JobSuccessExitCode"
    if until:
        check += " || " + until
    expr = f"NumJobCompletions > JobMaxRetries || ExitCode =?= {check}"
    if remove:
        expr += " || " + _exprs.wrap_for(remove, "||")
    b.expr("OnExitRemove", expr)


def set_concurrency_and_accounting(b: JobBuilder) -> None:
    """SetConcurrencyLimits and SetAccountingGroup."""
    limits = b.p("concurrency_limits")
    limits_expr = b.p("concurrency_limits_expr")
    if limits:
        if limits_expr:
            raise SubmitError(
                "concurrency_limits and concurrency_limits_expr can't be used together"
            )
        items = sorted(t for t in re.split(r"[,\s]+", limits.lower()) if t)
        for item in items:
            if not re.fullmatch(r"[\w.]+(:\d+(\.\d*)?)?", item):
                raise SubmitError(f"Invalid concurrency limit '{item}'")
        b.ad["ConcurrencyLimits"] = ",".join(items)
    elif limits_expr:
        b.expr("ConcurrencyLimits", limits_expr)
    group = b.p("accounting_group", "AccountingGroup")
    if b.pbool("nice_user", "NiceUser", False)[0]:
        if not group:
            group = b.config.nice_user_accounting_group_name
        elif group != b.config.nice_user_accounting_group_name:
            b.warnings.append(
                "nice_user conflicts with accounting_group. nice_user will be ignored"
            )
        b.ad["MaxJobRetirementTime"] = 0
    user = b.p("accounting_group_user", "AcctGroupUser")
    if not group and not user:
        return
    group_user = user or b.owner
    for name, what in ((group, "accounting_group"), (group_user, "accounting_group_user")):
        if name is not None and not re.fullmatch(r"[^\s@/\\:]+", name or "x"):
            raise SubmitError(f"Invalid {what}: {name}")
    b.ad["AcctGroupUser"] = group_user
    if group:
        b.ad["AcctGroup"] = group
        b.ad["AccountingGroup"] = f"{group}.{group_user}"
    else:
        b.ad["AccountingGroup"] = group_user


def set_simple(b: JobBuilder, commands: Sequence[Simple] = SIMPLE_COMMANDS) -> None:
    """The one-to-one commands of the prunable-keywords table (or a run of them)."""
    previous = False
    for cmd in commands:
        if cmd.alt_of_previous and previous:
            previous = False
            continue
        value = b.p(cmd.key, cmd.attr)
        previous = value is not None
        if value is None:
            continue
        kind = cmd.kind
        if kind is As.STRING:
            b.ad[cmd.attr] = value
        elif kind is As.LIST:
            b.ad[cmd.attr] = ",".join(t for t in re.split(r"[,\s]+", value) if t)
        elif kind is As.STRIPPED:
            stripped = value.strip()
            if len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
                stripped = stripped[1:-1]
            b.ad[cmd.attr] = stripped
        elif kind is As.LOGFILE:
            b.ad[cmd.attr] = b.full_path(value) if value else value
        elif kind is As.BOOL:
            flag = string_is_bool(value)
            if flag is None:
                raise SubmitError(f"{cmd.key}={value} is invalid, must eval to a boolean.")
            b.ad[cmd.attr] = flag
        elif kind in (As.INT, As.UINT):
            number = string_is_long(value)
            if number is None:
                raise SubmitError(f"{cmd.key}={value} is invalid, must eval to an integer.")
            if number < 0 and kind is As.UINT:
                raise SubmitError(
                    f"{cmd.key}={value} is invalid, must eval to a non-negative integer."
                )
            b.ad[cmd.attr] = number
        else:
            b.expr(cmd.attr, value)


def set_deferral(b: JobBuilder) -> None:
    """SetJobDeferral: DeferralTime and, for deferred or cron jobs, its window and prep time."""
    deferral = b.p("deferral_time", "DeferralTime")
    if deferral:
        _nonnegative(b, "DeferralTime", deferral, "deferral_time")
    if not any(
        a in b.ad
        for a in (
            "CronMinute",
            "CronHour",
            "CronDayOfMonth",
            "CronMonth",
            "CronDayOfWeek",
            "DeferralTime",
        )
    ):
        return
    window = b.p("cron_window", "CronWindow") or b.p("deferral_window", "DeferralWindow")
    if window:
        _nonnegative(b, "DeferralWindow", window, "deferral_window")
    else:
        b.ad["DeferralWindow"] = 0
    prep = b.p("cron_prep_time", "CronPrepTime") or b.p("deferral_prep_time", "DeferralPrepTime")
    if prep:
        _nonnegative(b, "DeferralPrepTime", prep, "deferral_prep_time")
    else:
        b.ad["DeferralPrepTime"] = 300


def _nonnegative(b: JobBuilder, attr: str, text: str, key: str) -> None:
    if not _classad.parses(text):
        raise SubmitError(f"{key} = {text} is invalid, must eval to a non-negative integer.")
    b.expr(attr, text)
    if _classad.is_literal(text):
        value = _classad.eval_text(text)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SubmitError(f"{key} = {text} is invalid, must eval to a non-negative integer.")
