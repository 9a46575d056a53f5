"""Starting a process without holding the GIL: the C library's posix_spawn, via ctypes.

glibc's posix_spawn is a vfork: no copy of the parent's page tables (subprocess.Popen
forks here, Python 3.11, and the kernel copies them holding the GIL), and the parent
sleeps until the child has exec'd. CPython holds the GIL through that sleep in
os.posix_spawn, so no thread of the process runs meanwhile: on a busy machine, where
the child waits for a CPU before it can exec, that was three quarters of the batch
GAHP's GIL time (py-spy, 16 sbatch at a time, load 28 on 2 cores). ctypes releases the
GIL around a foreign call: called so from a worker thread, the event loop goes on while
the child starts.

`spawn` falls back to os.posix_spawn (the GIL held) where the C library's cannot be
called (no ctypes, no such symbol).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable, Iterable, Sequence

__all__ = ["spawn"]

# glibc's and musl's <spawn.h> flags.
_SETSIGDEF = 0x04
_SETSIGMASK = 0x08
_SETSID = 0x80
# posix_spawnattr_t, posix_spawn_file_actions_t and sigset_t are opaque: generous room
# (glibc's are 336, 80 and 128 bytes on x86-64), set up by the library's own functions.
_OPAQUE = 1024


class _LibC:
    """The C library's posix_spawn and the calls that set up its arguments."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None, use_errno=True)
        ptr, c_int, char_pp = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)
        spawn_args = [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ptr, ptr, char_pp, char_pp]
        self.calls: dict[str, Callable[..., int]] = {}
        for name, args in {
            "posix_spawn": spawn_args,
            "posix_spawnp": spawn_args,
            "posix_spawn_file_actions_init": [ptr],
            "posix_spawn_file_actions_adddup2": [ptr, c_int, c_int],
            "posix_spawn_file_actions_destroy": [ptr],
            "posix_spawnattr_init": [ptr],
            "posix_spawnattr_setflags": [ptr, ctypes.c_short],
            "posix_spawnattr_setsigdefault": [ptr, ptr],
            "posix_spawnattr_setsigmask": [ptr, ptr],
            "posix_spawnattr_destroy": [ptr],
            "sigemptyset": [ptr],
            "sigaddset": [ptr, c_int],
        }.items():
            function = getattr(lib, name)
            function.argtypes = args
            function.restype = c_int
            self.calls[name] = function

    def spawn(
        self,
        path: str,
        argv: Sequence[str],
        dup2: Sequence[tuple[int, int]],
        default_signals: Sequence[int],
    ) -> int:
        call = self.calls
        actions = ctypes.create_string_buffer(_OPAQUE)
        attr = ctypes.create_string_buffer(_OPAQUE)
        defaults = ctypes.create_string_buffer(_OPAQUE)
        no_mask = ctypes.create_string_buffer(_OPAQUE)
        _check(call["posix_spawn_file_actions_init"](actions))
        try:
            _check(call["posix_spawnattr_init"](attr))
            try:
                for fd, target in dup2:
                    _check(call["posix_spawn_file_actions_adddup2"](actions, fd, target))
                _check(call["sigemptyset"](defaults))
                for number in default_signals:
                    _check(call["sigaddset"](defaults, number))
                _check(call["sigemptyset"](no_mask))
                _check(call["posix_spawnattr_setsigdefault"](attr, defaults))
                _check(call["posix_spawnattr_setsigmask"](attr, no_mask))
                flags = _SETSID | _SETSIGDEF | _SETSIGMASK
                _check(call["posix_spawnattr_setflags"](attr, flags))
                args = _strings(os.fsencode(a) for a in argv)
                env = _strings(k + b"=" + v for k, v in os.environb.items())
                pid = ctypes.c_int()
                function = call["posix_spawn" if "/" in path else "posix_spawnp"]
                # The GIL is released for this call: the vfork's wait for the exec.
                error = function(ctypes.byref(pid), os.fsencode(path), actions, attr, args, env)
                if error:
                    raise OSError(error, os.strerror(error), path)
                return pid.value
            finally:
                call["posix_spawnattr_destroy"](attr)
        finally:
            call["posix_spawn_file_actions_destroy"](actions)


def _strings(items: Iterable[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    values: list[bytes | None] = [*items, None]
    return (ctypes.c_char_p * len(values))(*values)


def _check(result: int) -> None:
    if result != 0:
        number = result if result > 0 else ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _load() -> _LibC | None:
    try:
        return _LibC()
    except (OSError, AttributeError):
        return None


_libc = _load()


def spawn(
    path: str,
    argv: Sequence[str],
    dup2: Sequence[tuple[int, int]],
    default_signals: Sequence[int] = (),
) -> int:
    """Start `path` (searched on the PATH if it has no '/') with `argv`, this process's
    environment, the `(fd, target)` descriptors duplicated, in a new session, with
    `default_signals` back to their default actions and no signal blocked; its pid.

    Raises OSError (the program missing, say) as os.posix_spawn does.
    """
    if _libc is not None:
        return _libc.spawn(path, argv, dup2, default_signals)
    function = os.posix_spawn if "/" in path else os.posix_spawnp
    return function(
        path,
        list(argv),
        os.environ,
        file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in dup2],
        setsid=True,
        setsigdef=default_signals,
        setsigmask=(),
    )


# The signals a command gets back at their defaults: Python ignores these (as
# subprocess's restore_signals puts them back).
RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)
