"""The cluster's own error, and the advice its start-up failures end with."""

from __future__ import annotations

START_ADVICE = ("The cluster was stopped. Re-run the setup cell; if it fails again, the machine "
                "may be overloaded: try fewer ranks (COURSE_WORLD_SIZE=2) or a larger "
                "start_timeout.")


class ClusterError(RuntimeError):
    """The cluster did not start or did not answer; the message says which ranks and what to do."""
