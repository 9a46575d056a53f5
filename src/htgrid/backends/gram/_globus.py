"""The Grid Community Toolkit's GRAM client library through ctypes (libglobus_gram_client).

One `GramClient` per process: the library keeps one credential (the X.509 proxy named by
X509_USER_PROXY, read again with `refresh_credential` when the file changes). Its calls
block on the network: the GAHP server makes them from one worker thread, never from the
event loop. Loading fails with GlobusUnavailable when the toolkit is not installed.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

from htgrid.errors import HTGridError

__all__ = [
    "ERROR_CONTACT_NOT_FOUND",
    "ERROR_WAITING_FOR_COMMIT",
    "GlobusUnavailable",
    "GramClient",
    "JobStatus",
]

#: globus_gram_protocol_constants.h's codes the server reads.
ERROR_WAITING_FOR_COMMIT = 110
ERROR_CONTACT_NOT_FOUND = 156
_GSS_C_INITIATE = 1
_STATE_ALL = 0xFFFFF
_DONE = 8


class GlobusUnavailable(HTGridError):
    """The toolkit's libraries cannot be loaded or activated."""


class _JobInfo(ctypes.Structure):
    # globus_gram_client_job_info_t (globus_gram_client.h).
    _fields_ = (
        ("extensions", ctypes.c_void_p),
        ("job_contact", ctypes.c_char_p),
        ("job_state", ctypes.c_int),
        ("protocol_error_code", ctypes.c_int),
    )


class _Extension(ctypes.Structure):
    # globus_gram_protocol_extension_t (globus_gram_protocol.h).
    _fields_ = (("attribute", ctypes.c_char_p), ("value", ctypes.c_char_p))


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job's status as the job manager told it: the call's code, the state, the job's
    failure code, and its exit code when the job manager reported one (GRAM5)."""

    code: int
    state: int = 0
    failure: int = 0
    exit_code: int | None = None


@dataclass
class GramClient:
    """The activated GRAM client module; every method blocks."""

    _common: ctypes.CDLL = field(init=False)
    _gram: ctypes.CDLL = field(init=False)
    _assist: ctypes.CDLL = field(init=False)
    _module: int = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        try:
            self._common = ctypes.CDLL("libglobus_common.so.0", mode=ctypes.RTLD_GLOBAL)
            self._gram = ctypes.CDLL("libglobus_gram_client.so.3", mode=ctypes.RTLD_GLOBAL)
            self._assist = ctypes.CDLL("libglobus_gss_assist.so.3", mode=ctypes.RTLD_GLOBAL)
        except OSError as err:
            raise GlobusUnavailable(f"the GRAM client library is not installed: {err}") from None
        module = ctypes.c_void_p.in_dll(self._gram, "globus_gram_client_module")
        self._module = ctypes.addressof(module)
        c = ctypes
        self._common.globus_module_activate.argtypes = [c.c_void_p]
        self._common.globus_module_deactivate.argtypes = [c.c_void_p]
        self._common.globus_hashtable_lookup.argtypes = [c.c_void_p, c.c_void_p]
        self._common.globus_hashtable_lookup.restype = c.c_void_p
        g = self._gram
        g.globus_gram_client_error_string.argtypes = [c.c_int]
        g.globus_gram_client_error_string.restype = c.c_char_p
        g.globus_gram_client_ping.argtypes = [c.c_char_p]
        g.globus_gram_client_job_request.argtypes = [
            c.c_char_p,
            c.c_char_p,
            c.c_int,
            c.c_char_p,
            c.POINTER(c.c_char_p),
        ]
        g.globus_gram_client_job_status.argtypes = [
            c.c_char_p,
            c.POINTER(c.c_int),
            c.POINTER(c.c_int),
        ]
        g.globus_gram_client_job_status_with_info.argtypes = [c.c_char_p, c.POINTER(_JobInfo)]
        g.globus_gram_client_job_info_destroy.argtypes = [c.POINTER(_JobInfo)]
        g.globus_gram_client_job_signal.argtypes = [
            c.c_char_p,
            c.c_int,
            c.c_char_p,
            c.POINTER(c.c_int),
            c.POINTER(c.c_int),
        ]
        g.globus_gram_client_job_cancel.argtypes = [c.c_char_p]
        g.globus_gram_client_job_refresh_credentials.argtypes = [c.c_char_p, c.c_void_p]
        g.globus_gram_client_set_credentials.argtypes = [c.c_void_p]
        g.globus_gram_client_get_jobmanager_version.argtypes = [c.c_char_p, c.c_void_p]
        g.globus_gram_client_job_contact_free.argtypes = [c.c_void_p]
        self._assist.globus_gss_assist_acquire_cred.argtypes = [
            c.POINTER(c.c_uint32),
            c.c_int,
            c.POINTER(c.c_void_p),
        ]
        self._assist.globus_gss_assist_acquire_cred.restype = c.c_uint32
        if self._common.globus_module_activate(self._module) != 0:
            raise GlobusUnavailable("activating the GRAM client module failed")

    def close(self) -> None:
        with self._lock:
            self._common.globus_module_deactivate(self._module)

    def error_string(self, code: int) -> str:
        text = self._gram.globus_gram_client_error_string(code)
        return text.decode(errors="replace") if text else f"GRAM error {code}"

    def refresh_credential(self) -> str | None:
        """Read the proxy again (X509_USER_PROXY) for the calls that follow; the reason
        when it cannot be read."""
        minor = ctypes.c_uint32()
        cred = ctypes.c_void_p()
        with self._lock:
            major = self._assist.globus_gss_assist_acquire_cred(
                ctypes.byref(minor), _GSS_C_INITIATE, ctypes.byref(cred)
            )
            if major != 0:
                return f"cannot acquire the proxy credential (GSS major status {major:#x})"
            self._gram.globus_gram_client_set_credentials(cred)
        return None

    def ping(self, contact: str) -> int:
        with self._lock:
            return int(self._gram.globus_gram_client_ping(contact.encode()))

    def job_request(self, contact: str, rsl: str, callback: str | None) -> tuple[int, str | None]:
        out = ctypes.c_char_p()
        with self._lock:
            code = self._gram.globus_gram_client_job_request(
                contact.encode(),
                rsl.encode(),
                _STATE_ALL,
                callback.encode() if callback else None,
                ctypes.byref(out),
            )
        job = out.value.decode() if out.value else None
        return int(code), job

    def job_status(self, contact: str) -> JobStatus:
        """The job's state and failure code; and its exit code once DONE, if the job
        manager reports one (GRAM5's exit-code extension)."""
        state, failure = ctypes.c_int(), ctypes.c_int()
        with self._lock:
            code = self._gram.globus_gram_client_job_status(
                contact.encode(), ctypes.byref(state), ctypes.byref(failure)
            )
        exit_code = None
        if code == 0 and state.value == _DONE:
            exit_code = self._exit_code(contact)
        return JobStatus(int(code), state.value, failure.value, exit_code)

    def _exit_code(self, contact: str) -> int | None:
        info = _JobInfo()
        with self._lock:
            code = self._gram.globus_gram_client_job_status_with_info(
                contact.encode(), ctypes.byref(info)
            )
            try:
                text = self._extension(info, b"exit-code") if code == 0 else None
            finally:
                self._gram.globus_gram_client_job_info_destroy(ctypes.byref(info))
        return int(text) if text is not None and text.lstrip("-").isdigit() else None

    def _extension(self, info: _JobInfo, name: bytes) -> str | None:
        if not info.extensions:
            return None
        table = ctypes.c_void_p(info.extensions)
        found = self._common.globus_hashtable_lookup(ctypes.byref(table), name)
        if not found:
            return None
        entry = _Extension.from_address(found)
        return entry.value.decode(errors="replace") if entry.value else None

    def job_signal(self, contact: str, signal: int, arg: str | None) -> JobStatus:
        state, failure = ctypes.c_int(), ctypes.c_int()
        with self._lock:
            code = self._gram.globus_gram_client_job_signal(
                contact.encode(),
                signal,
                arg.encode() if arg else None,
                ctypes.byref(state),
                ctypes.byref(failure),
            )
        return JobStatus(int(code), state.value, failure.value)

    def job_cancel(self, contact: str) -> int:
        with self._lock:
            return int(self._gram.globus_gram_client_job_cancel(contact.encode()))

    def job_refresh(self, contact: str) -> int:
        """Delegate the credential (as read last) to the job again."""
        with self._lock:
            return int(
                self._gram.globus_gram_client_job_refresh_credentials(contact.encode(), None)
            )

    def jobmanager_version(self, contact: str) -> tuple[int, dict[str, str]]:
        """The job manager's version extensions (toolkit-version, version...)."""
        table = ctypes.c_void_p()
        with self._lock:
            code = self._gram.globus_gram_client_get_jobmanager_version(
                contact.encode(), ctypes.byref(table)
            )
            found: dict[str, str] = {}
            if code == 0 and table.value:
                for name in (b"toolkit-version", b"version"):
                    entry = self._common.globus_hashtable_lookup(ctypes.byref(table), name)
                    if entry:
                        value = _Extension.from_address(entry).value
                        found[name.decode()] = value.decode(errors="replace") if value else ""
        return int(code), found
