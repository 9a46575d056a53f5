"""Job-ad steps for environment and Java VM arguments (SetEnvironment, SetJavaVMArgs)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from htgrid.submit._argsenv import (
    Environment,
    is_safe_v1_value,
    is_safe_v2_value,
    is_v2_quoted,
    parse_args_v1_wacked_or_v2_quoted,
    parse_args_v2_quoted,
)
from htgrid.submit._errors import SubmitError
from htgrid.submit._values import string_is_bool

if TYPE_CHECKING:
    from htgrid.submit._jobad import JobBuilder

__all__ = ["set_environment", "set_java_vm_args"]


def set_environment(self: JobBuilder) -> None:
    env1 = self.p("environment", "env")
    env2 = self.p("environment2")
    allow_v1 = self.pbool("allow_environment_v1", None, False)[0]
    prefer_v1 = False
    if env1 and not env2:
        env_value = self.p("env")
        prefer_v1 = env_value is not None and not is_v2_quoted(env_value)
    if env1 and env2 and not allow_v1:
        raise SubmitError(
            "If you wish to specify both 'environment' and\n'environment2' for maximal "
            "compatibility with different\nversions of Condor, then you must also "
            "specify\nallow_environment_v1=true."
        )
    env = Environment()
    try:
        if env2:
            env.merge_v2_quoted(env2)
        elif env1:
            env.merge_v1_raw_or_v2_quoted(env1)
    except SubmitError as exc:
        raise SubmitError(
            f"{exc.reason}\nThe environment you specified was: '{env2 or env1}'"
        ) from None
    getenv = self.p("getenv", "get_env")
    if getenv is not None:
        as_bool = string_is_bool(getenv)
        v1_only = bool(env1 and not env2)
        if as_bool is None:
            import_env(env, self.env, getenv, v1_only)
        elif as_bool:
            import_env(env, self.env, "*", v1_only)
    if prefer_v1:
        self.ad["Env"] = env.v1_raw()
        self.ad["EnvDelim"] = ";"
    else:
        self.ad["Environment"] = env.v2_raw()


def set_java_vm_args(self: JobBuilder) -> None:
    args1 = self.p("java_vm_args")
    args1_ext = self.p("java_vm_arguments", "JavaVMArgs")
    args2 = self.p("java_vm_arguments2")
    if args1 and args1_ext:
        raise SubmitError("you specified a value for both java_vm_args and java_vm_arguments.")
    args1 = args1_ext or args1
    if args1 and args2 and not self.pbool("allow_arguments_v1", None, False)[0]:
        raise SubmitError(
            "If you wish to specify both 'java_vm_arguments' and\n'java_vm_arguments2' ..."
        )
    if args2 is not None:
        parsed = parse_args_v2_quoted(args2)
    elif args1 is not None:
        parsed = parse_args_v1_wacked_or_v2_quoted(args1)
    else:
        return
    if parsed.input_was_v1:
        if parsed.words:
            self.ad["JavaVMArgs"] = parsed.v1_raw()
    elif parsed.words:
        self.ad["JavaVMArguments"] = parsed.v2_raw()


def import_env(env: Environment, source: Mapping[str, str], patterns: str, v1_only: bool) -> None:
    """getenv: copy submitter variables matching the pattern list (`!` excludes)."""
    allow: list[str] = []
    deny: list[str] = []
    for pattern in re.split(r"[,\s]+", patterns):
        if not pattern:
            continue
        (deny if pattern.startswith("!") else allow).append(pattern.lstrip("!"))
    for name, value in source.items():
        if name in env or not name or "=" in name:
            continue
        if any(fnmatch.fnmatchcase(name.upper(), pat.upper()) for pat in deny):
            continue
        if allow and not any(fnmatch.fnmatchcase(name.upper(), pat.upper()) for pat in allow):
            continue
        if v1_only and not is_safe_v1_value(value):
            continue
        if not is_safe_v2_value(value):
            continue
        env.set(name, value)
