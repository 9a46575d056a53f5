"""HTCondor's hold and vacate reason codes (condor_holdcodes.h), and the job actions users
ask for."""

from __future__ import annotations

import enum

__all__ = ["HoldReasonCode", "JobAction", "VacateReasonCode"]


class HoldReasonCode(enum.IntEnum):
    """`HoldReasonCode` values; the member names are HTCondor's `NumHoldsByReason` labels."""

    Unspecified = 0
    UserRequest = 1
    GlobusGramError = 2
    JobPolicy = 3
    CorruptedCredential = 4
    JobPolicyUndefined = 5
    FailedToCreateProcess = 6
    UnableToOpenOutput = 7
    UnableToOpenInput = 8
    UnableToOpenOutputStream = 9
    UnableToOpenInputStream = 10
    InvalidTransferAck = 11
    TransferOutputError = 12
    TransferInputError = 13
    IwdError = 14
    SubmittedOnHold = 15
    SpoolingInput = 16
    JobShadowMismatch = 17
    InvalidTransferGoAhead = 18
    HookPrepareJobFailure = 19
    MissedDeferredExecutionTime = 20
    StartdHeldJob = 21
    UnableToInitUserLog = 22
    FailedToAccessUserAccount = 23
    NoCompatibleShadow = 24
    InvalidCronSettings = 25
    SystemPolicy = 26
    SystemPolicyUndefined = 27
    GlexecChownSandboxToUser = 28
    PrivsepChownSandboxToUser = 29
    GlexecChownSandboxToCondor = 30
    PrivsepChownSandboxToCondor = 31
    MaxTransferInputSizeExceeded = 32
    MaxTransferOutputSizeExceeded = 33
    JobOutOfResources = 34
    InvalidDockerImage = 35
    FailedToCheckpoint = 36
    EC2UserError = 37
    EC2InternalError = 38
    EC2AdminError = 39
    EC2ConnectionProblem = 40
    EC2ServerError = 41
    EC2InstancePotentiallyLostError = 42
    PreScriptFailed = 43
    PostScriptFailed = 44
    SingularityTestFailed = 45
    JobDurationExceeded = 46
    JobExecuteExceeded = 47
    HookShadowPrepareJobFailure = 48

    @property
    def is_system_hold(self) -> bool:
        """Whether the schedd counts this hold in `NumSystemHolds`.

        Holds asked for by the user, by the job's or the system's policy, or at submit are
        not "system" holds; everything else (transfer errors, grid errors...) is.
        """
        return self not in _NOT_SYSTEM


class VacateReasonCode(enum.IntEnum):
    """`VacateReasonCode` values: why a run stopped before its job ended (the job goes
    back to idle with `VacateReason`, and its 004 event says the same)."""

    JobPolicyVacate = 1000
    SystemPolicyVacate = 1001
    ShadowException = 1002
    JobNotStarted = 1003
    UserVacateJob = 1004
    JobShouldRequeue = 1005
    FailedToActivateClaim = 1006
    StarterError = 1007
    ReconnectFailed = 1008
    ClaimDeactivated = 1009
    StartdVacateCommand = 1010
    StartdPreemptExpression = 1011
    StartdException = 1012
    StartdShutdown = 1013
    StartdDraining = 1014
    StartdCoalesce = 1015
    StartdHibernate = 1016
    StartdReleaseCommand = 1017
    StartdPreemptingClaimRank = 1018
    StartdPreemptingClaimUserPrio = 1019
    VMError = 1020
    ContainerError = 1021
    ScheddVacate = 1022
    JobRemoved = 1023
    ScratchDirError = 1024


_NOT_SYSTEM = frozenset(
    {
        HoldReasonCode.UserRequest,
        HoldReasonCode.JobPolicy,
        HoldReasonCode.JobPolicyUndefined,
        HoldReasonCode.SubmittedOnHold,
        HoldReasonCode.SpoolingInput,
        HoldReasonCode.SystemPolicy,
        HoldReasonCode.SystemPolicyUndefined,
    }
)


class JobAction(enum.Enum):
    """What `JobQueue.act` does, named as htcondor2.JobAction names them."""

    Hold = "hold"
    Release = "release"
    Remove = "remove"
    RemoveX = "removex"  # condor_rm -forcex: drop a Removed job from the queue now
