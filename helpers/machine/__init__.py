"""What this machine and its PyTorch can do: which operations each backend supports here
(``backends``, notebooks 00, 01, 02 and 08), which PyTorch build to install
(``torch_build``, ``make install``) and whether the machine is ready for a workshop
(``preflight``, ``make check``).
"""

from .backends import P2P_PROBES, backend_works, probe_support

__all__ = ["P2P_PROBES", "backend_works", "probe_support"]
