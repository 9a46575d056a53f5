"""The security tests' fixtures: a second local user, its home and a directory of its
own (`_accounts`)."""

from __future__ import annotations

from ._accounts import second_user, shared_dir, user_runs_python, workdir

__all__ = ["second_user", "shared_dir", "user_runs_python", "workdir"]
