"""The error tree of htgrid: every error it raises is an `HTGridError`.

Catch `HTGridError` for anything htgrid could not do, or a branch for one part of it.
Each error is defined in the package that raises it (named beside it here); the classes
of the ClassAd language are here, because every package raises them. A class may also be
a built-in exception where scripts expect one (`also`). tests/test_error_tree.py checks
this drawing against the classes themselves.

HTGridError
    ClassAdException  (htgrid)
        ClassAdEnumError  (htgrid; also TypeError)
        ClassAdEvaluationError  (htgrid; also TypeError, RuntimeError)
        ClassAdInternalError  (htgrid; also ValueError, RuntimeError)
        ClassAdOSError  (htgrid; also OSError, RuntimeError)
        ClassAdSyntaxError  (htgrid; also ValueError, SyntaxError, RuntimeError)
        ClassAdTypeError  (htgrid; also TypeError, ValueError)
        ClassAdValueError  (htgrid; also ValueError, RuntimeError, TypeError)
    PrivilegeError  (htgrid)
        OwnerRefused  (htgrid)
    UsageError  (htgrid)
    AnnexError  (htgrid.annex)
        AnnexCloudError  (htgrid.annex)
        AnnexNotFound  (htgrid.annex)
        AnnexUsageError  (htgrid.annex)
        SetupMissing  (htgrid.annex)
    AzureError  (htgrid.backends)
        AzureArgumentError  (htgrid.backends)
        AzureServiceError  (htgrid.backends)
    BatchError  (htgrid.backends)
        BackendError  (htgrid.backends)
        BackendUnavailable  (htgrid.backends)
        InvalidSubmitAd  (htgrid.backends)
        UnknownBackend  (htgrid.backends; also LookupError)
    CondorGahpError  (htgrid.backends)
        ConnectFailure  (htgrid.backends)
        LocateError  (htgrid.backends)
        RemoteRefusal  (htgrid.backends)
        SandboxError  (htgrid.backends)
    Ec2Error  (htgrid.backends)
        Ec2RequestError  (htgrid.backends)
        Ec2ServiceError  (htgrid.backends)
        Ec2TransportError  (htgrid.backends)
    GlobusUnavailable  (htgrid.backends)
    MyProxyError  (htgrid.client)
        MyProxyRefused  (htgrid.client)
        NoMyProxyPassword  (htgrid.grid)
    NotAToken  (htgrid.client; also ValueError)
        OtherAlgorithm  (htgrid.client)
    ProxyError  (htgrid.client; also ValueError)
    CollectorError  (htgrid.collector)
        CollectorRefused  (htgrid.collector)
        CollectorUnavailable  (htgrid.collector)
        InvalidAd  (htgrid.collector)
        InvalidQuery  (htgrid.collector)
        NotRegistered  (htgrid.collector)
        ProtocolError  (htgrid.collector)
        UnknownCommand  (htgrid.collector)
    EventLogError  (htgrid.eventlog)
    GahpError  (htgrid.gahp)
        BadArguments  (htgrid.gahp)
        GahpProtocolError  (htgrid.gahp)
        GahpRequestRefused  (htgrid.gahp)
        GahpServerExited  (htgrid.gahp)
        GahpTimeout  (htgrid.gahp)
        LocalGahpError  (htgrid.gahp)
    GridError  (htgrid.grid)
        AlreadyRunning  (htgrid.grid)
        BadJobAd  (htgrid.grid; also ValueError)
        BadTransition  (htgrid.grid)
        GahpUnavailable  (htgrid.grid)
        JobGone  (htgrid.grid)
        MissingAttribute  (htgrid.grid; also ValueError)
        RemoteCallFailed  (htgrid.grid)
        RslError  (htgrid.grid; also ValueError)
        TransferFailed  (htgrid.grid)
        UnsupportedGridJob  (htgrid.grid)
    ApiError  (htgrid.net)
    BadRequest  (htgrid.net)
    CedarError  (htgrid.net)
        CedarRefused  (htgrid.net)
        SslFailed  (htgrid.net)
    DaemonUnavailable  (htgrid.net)
        ScheddNotFound  (htgrid.collector)
    RequestTooLarge  (htgrid.net)
    SandboxTooLarge  (htgrid.net)
    SecurityError  (htgrid.net)
        AuthError  (htgrid.net)
            DeniedIdentity  (htgrid.net)
            ExpiredToken  (htgrid.net)
            ForgedToken  (htgrid.net)
            InsufficientScope  (htgrid.net)
            IssuerUnavailable  (htgrid.net)
            MalformedToken  (htgrid.net)
            MissingToken  (htgrid.net)
            RevokedToken  (htgrid.net)
            TokenNotYetValid  (htgrid.net)
            UnknownKey  (htgrid.net)
            UnmappedIdentity  (htgrid.net)
            UntrustedIssuer  (htgrid.net)
            WrongAudience  (htgrid.net)
        CertificateError  (htgrid.net)
    LaunchError  (htgrid.pool)
    PoolError  (htgrid.pool)
        ScheddError  (htgrid.schedd)
    QueueError  (htgrid.queue)
        InvalidSubmit  (htgrid.queue)
        InvalidTransition  (htgrid.queue)
        InvalidValue  (htgrid.queue)
        JobNotFound  (htgrid.queue)
        NotAuthorized  (htgrid.queue)
        ProtectedAttribute  (htgrid.queue)
        StoreError  (htgrid.queue)
    RouterError  (htgrid.router)
        HookFailed  (htgrid.router)
    Evicted  (htgrid.schedd)
        Unreachable  (htgrid.schedd)
    FactoryRefused  (htgrid.schedd)
    GaveUp  (htgrid.schedd)
    NotStarted  (htgrid.schedd)
    StartdError  (htgrid.startd)
        CallerRefused  (htgrid.startd)
        ClaimNotFound  (htgrid.startd)
        ClaimRefused  (htgrid.startd)
        ClaimStateError  (htgrid.startd)
        StartdProtocolError  (htgrid.startd)
        StartdUnavailable  (htgrid.startd)
        TransferError  (htgrid.startd)
    SubmitError  (htgrid.submit)
"""

from __future__ import annotations

__all__ = [
    "ClassAdEnumError",
    "ClassAdEvaluationError",
    "ClassAdException",
    "ClassAdInternalError",
    "ClassAdOSError",
    "ClassAdSyntaxError",
    "ClassAdTypeError",
    "ClassAdValueError",
    "HTGridError",
    "UsageError",
]


class HTGridError(Exception):
    """Something htgrid could not do."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else (type(self).__doc__ or "").strip())


class ClassAdException(HTGridError):
    """A ClassAd operation failed."""


class ClassAdSyntaxError(ClassAdException, ValueError, SyntaxError, RuntimeError):
    """The text is not valid ClassAd syntax.

    Carries where it went wrong: `line` and `column` (both 1-based), the offending
    `source` line, and a caret excerpt in the message.
    """

    offset: int  # where in the ClassAd text (SyntaxError's own may be None)

    def __init__(
        self,
        reason: str,
        *,
        text: str = "",
        offset: int = 0,
        origin: str = "",
    ) -> None:
        line = text.count("\n", 0, offset) + 1
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        if end < 0:
            end = len(text)
        column = offset - start + 1
        source = text[start:end]
        self.reason = reason
        self.line = line
        self.column = column
        self.offset = offset
        self.source = source
        self.origin = origin
        where = f"{origin}:" if origin else ""
        excerpt = source if len(source) <= 200 else source[max(0, column - 100) : column + 100]
        caret_col = column - 1 if len(source) <= 200 else min(column - 1, 100)
        message = (
            f"{where}line {line}, column {column}: {reason}\n    {excerpt}\n    {' ' * caret_col}^"
        )
        super().__init__(message)
        # What SyntaxError prints (str() and tracebacks); its file, line and text fields
        # stay unset, since `line`, `column` and `source` say those of the ClassAd text.
        self.msg = message


class ClassAdValueError(ClassAdException, ValueError, RuntimeError, TypeError):
    """A Python value that has no ClassAd form."""


class ClassAdEvaluationError(ClassAdException, TypeError, RuntimeError):
    """An expression could not be evaluated (or to no value the caller can use)."""


class ClassAdTypeError(ClassAdException, TypeError, ValueError):
    """A value of the wrong type for a ClassAd operation."""


class ClassAdEnumError(ClassAdException, TypeError):
    """A value that must be a member of an enumeration is not."""


class ClassAdInternalError(ClassAdException, ValueError, RuntimeError):
    """The ClassAd library came to a state it should not reach."""


class ClassAdOSError(ClassAdException, OSError, RuntimeError):
    """An operating-system failure of the ClassAd library (a library not loaded)."""


class UsageError(HTGridError):
    """The command line cannot be carried out."""
