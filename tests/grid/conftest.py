"""Fixtures of the grid manager tests (the helpers live in _harness.py)."""

from __future__ import annotations

from ._harness import grid

__all__ = ["grid"]
