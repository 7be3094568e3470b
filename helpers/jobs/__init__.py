"""Jobs outside the notebook: torchrun and Slurm jobs run from a cell, bounded and watched.

Introduced in notebook 07 (launching), which imports what it uses from here. ``launch``
runs commands and watches what they listen on; ``pinstore`` keeps a job's TCP stores on the
address they were given (``python -m helpers.jobs.pinstore torchrun ...``).
"""

from typing import Any

from ..cluster.topology import resolve_world_size
from .launch import free_port, free_ports, loopback_env, pinned, reports, run_many, run_watched

__all__ = ["free_port", "free_ports", "loopback_env", "pin", "pinned", "reports",
           "resolve_world_size", "run_many", "run_watched"]


def __getattr__(name: str) -> Any:
    """``pin``, imported on first use: ``python -m helpers.jobs.pinstore`` runs that module as
    a script, which must not be imported already when the package is (runpy warns)."""
    if name == "pin":
        from .pinstore import pin

        return pin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
