"""Constant tables: universes, signals, and the simple submit commands.

`SIMPLE_COMMANDS` is HTCondor's `prunable_keywords` table (submit_utils.cpp):
commands copied into the job ad with no other effect. Each entry names the
submit command, the job attribute (which also works as a command name), and
how the value is inserted.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["SIGNALS", "SIMPLE_COMMANDS", "UNIVERSES", "As", "Simple", "universe_number"]


class As(Enum):
    """How a simple command's value goes into the ad."""

    EXPR = "expr"
    STRING = "string"
    LIST = "list"  # a string, normalized to a comma-separated list
    STRIPPED = "stripped"  # a string, surrounding quotes removed
    LOGFILE = "logfile"  # a string, made an absolute path
    BOOL = "bool"
    INT = "int"
    UINT = "uint"


@dataclass(frozen=True, slots=True)
class Simple:
    """One simple submit command."""

    key: str
    attr: str
    kind: As
    alt_of_previous: bool = False


SIMPLE_COMMANDS: tuple[Simple, ...] = (
    Simple("next_job_start_delay", "NextJobStartDelay", As.EXPR),
    Simple("keep_claim_idle", "KeepClaimIdle", As.EXPR),
    Simple("job_ad_information_attrs", "JobAdInformationAttrs", As.STRING),
    Simple("ulog_execute_attrs", "ULogExecuteEventAttrs", As.STRING),
    Simple("max_idle", "JobMaterializeMaxIdle", As.EXPR),
    Simple("materialize_max_idle", "JobMaterializeMaxIdle", As.EXPR, alt_of_previous=True),
    Simple("docker_network_type", "DockerNetworkType", As.STRING),
    Simple("docker_pull_policy", "DockerPullPolicy", As.STRING),
    Simple("docker_override_entrypoint", "DockerOverrideEntrypoint", As.BOOL),
    Simple("container_target_dir", "ContainerTargetDir", As.STRIPPED),
    Simple("transfer_container", "TransferContainer", As.BOOL),
    Simple("transfer_plugins", "TransferPlugins", As.STRING),
    Simple("want_io_proxy", "WantIOProxy", As.BOOL),
    Simple("starter_debug", "JobStarterDebug", As.STRIPPED),
    Simple("starter_log", "JobStarterLog", As.LOGFILE),
    Simple("job_machine_attrs", "JobMachineAttrs", As.STRING),
    Simple("job_machine_attrs_history_length", "JobMachineAttrsHistoryLength", As.INT),
    Simple("notify_user", "NotifyUser", As.STRING),
    Simple("email_attributes", "EmailAttributes", As.LIST),
    Simple("remote_initialdir", "RemoteIwd", As.STRING),
    Simple("remote_grid_resource", "Remote_GridResource", As.STRING),
    Simple("remote_remote_grid_resource", "Remote_Remote_GridResource", As.STRING),
    Simple("output_destination", "OutputDestination", As.STRING),
    Simple("want_graceful_removal", "WantGracefulRemoval", As.EXPR),
    Simple("job_max_vacate_time", "JobMaxVacateTime", As.EXPR),
    Simple("encrypt_execute_directory", "EncryptExecuteDirectory", As.BOOL),
    Simple("encrypt_input_files", "EncryptInputFiles", As.STRING),
    Simple("encrypt_output_files", "EncryptOutputFiles", As.STRING),
    Simple("dont_encrypt_input_files", "DontEncryptInputFiles", As.STRING),
    Simple("dont_encrypt_output_files", "DontEncryptOutputFiles", As.STRING),
    Simple("load_profile", "LoadProfile", As.BOOL),
    Simple("file_remaps", "FileRemaps", As.EXPR),
    Simple("buffer_files", "BufferFiles", As.EXPR),
    Simple("buffer_size", "BufferSize", As.EXPR),
    Simple("buffer_block_size", "BufferBlockSize", As.EXPR),
    Simple("fetch_files", "FetchFiles", As.STRING),
    Simple("compress_files", "CompressFiles", As.STRING),
    Simple("append_files", "AppendFiles", As.STRING),
    Simple("local_files", "LocalFiles", As.STRING),
    Simple("log", "UserLog", As.LOGFILE),
    Simple("dagman_log", "DAGManNodesLog", As.LOGFILE),
    Simple("log_xml", "UserLogUseXML", As.BOOL),
    Simple("noop_job", "IsNoopJob", As.EXPR),
    Simple("noop_job_exit_signal", "NoopJobExitSignal", As.EXPR),
    Simple("noop_job_exit_code", "NoopJobExitCode", As.EXPR),
    Simple("dag_node_name", "DAGNodeName", As.STRING),
    Simple("match_list_length", "LastMatchListLength", As.INT),
    Simple("dagman_job_id", "DAGManJobId", As.UINT),
    Simple("submit_event_notes", "SubmitEventNotes", As.STRING),
    Simple("submit_event_user_notes", "SubmitEventUserNotes", As.STRING),
    Simple("stack_size", "StackSize", As.EXPR),
    Simple("jar_files", "JarFiles", As.STRING),
    Simple("parallel_script_shadow", "ParallelScriptShadow", As.STRING),
    Simple("parallel_script_starter", "ParallelScriptStarter", As.STRING),
    Simple("cron_minute", "CronMinute", As.STRING),
    Simple("cron_hour", "CronHour", As.STRING),
    Simple("cron_day_of_month", "CronDayOfMonth", As.STRING),
    Simple("cron_month", "CronMonth", As.STRING),
    Simple("cron_day_of_week", "CronDayOfWeek", As.STRING),
    Simple("description", "JobDescription", As.STRING),
    Simple("batch_name", "JobBatchName", As.STRIPPED),
    Simple("batch_id", "JobBatchId", As.STRIPPED),
    Simple("max_job_retirement_time", "MaxJobRetirementTime", As.EXPR),
    Simple("job_lease_duration", "JobLeaseDuration", As.EXPR),
    Simple("core_size", "CoreSize", As.INT),
    Simple("coresize", "CoreSize", As.INT, alt_of_previous=True),
    Simple("priority", "JobPrio", As.INT),
    Simple("prio", "JobPrio", As.INT, alt_of_previous=True),
    Simple("run_as_owner", "RunAsOwner", As.BOOL),
    Simple("max_transfer_input_mb", "MaxTransferInputMB", As.EXPR),
    Simple("max_transfer_output_mb", "MaxTransferOutputMB", As.EXPR),
    Simple("manifest", "JobManifestDesired", As.BOOL),
    Simple("manifest_dir", "JobManifestDir", As.STRING),
    Simple("checkpoint_exit_code", "CheckpointExitCode", As.INT),
    Simple("checkpoint_destination", "CheckpointDestination", As.STRING),
    Simple("aws_region", "AWSRegion", As.STRING),
    Simple("aws_access_key_id_file", "EC2AccessKeyId", As.STRING),
    Simple("aws_secret_access_key_file", "EC2SecretAccessKey", As.STRING),
    Simple("s3_access_key_id_file", "EC2AccessKeyId", As.STRING),
    Simple("s3_secret_access_key_file", "EC2SecretAccessKey", As.STRING),
    Simple("gs_access_key_id_file", "EC2AccessKeyId", As.STRING),
    Simple("gs_secret_access_key_file", "EC2SecretAccessKey", As.STRING),
    Simple("erase_output_and_error_on_restart", "DontAppend", As.BOOL),
    Simple("transfer_checkpoint_files", "TransferCheckpoint", As.STRING),
    Simple("preserve_relative_paths", "PreserveRelativePaths", As.BOOL),
    Simple("require_cuda_version", "CUDAVersion", As.STRING),
    Simple("skip_if_dataflow", "SkipIfDataflow", As.BOOL),
    Simple("allowed_job_duration", "AllowedJobDuration", As.EXPR),
    Simple("allowed_execute_duration", "AllowedExecuteDuration", As.EXPR),
    Simple("jobset", "JobSetName", As.STRIPPED),
)

# Universe names (condor_universe.cpp); the values are JobUniverse numbers.
UNIVERSES: dict[str, int] = {
    "standard": 1,
    "pipe": 2,
    "linda": 3,
    "pvm": 4,
    "vanilla": 5,
    "pvmd": 6,
    "scheduler": 7,
    "mpi": 8,
    "grid": 9,
    "globus": 9,
    "java": 10,
    "parallel": 11,
    "local": 12,
    "vm": 13,
}

UNIVERSE_NAMES = {
    1: "Standard",
    2: "Pipe",
    3: "Linda",
    4: "PVM",
    6: "PVMd",
}


def universe_number(text: str) -> int:
    """A universe given by name or number (0 when unknown)."""
    stripped = text.strip()
    digits = ""
    for ch in stripped:
        if ch.isdigit() or (not digits and ch in "+-"):
            digits += ch
        else:
            break
    if digits not in ("", "+", "-") and int(digits) != 0:
        return int(digits)
    return UNIVERSES.get(stripped.lower(), 0)


# Linux signal numbers, for kill_sig and friends.
SIGNALS: dict[str, int] = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGIOT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGUSR1": 10,
    "SIGSEGV": 11,
    "SIGUSR2": 12,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
    "SIGSTKFLT": 16,
    "SIGCHLD": 17,
    "SIGCONT": 18,
    "SIGSTOP": 19,
    "SIGTSTP": 20,
    "SIGTTIN": 21,
    "SIGTTOU": 22,
    "SIGURG": 23,
    "SIGXCPU": 24,
    "SIGXFSZ": 25,
    "SIGVTALRM": 26,
    "SIGPROF": 27,
    "SIGWINCH": 28,
    "SIGIO": 29,
    "SIGPWR": 30,
    "SIGSYS": 31,
}
