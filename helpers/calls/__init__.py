"""The call record: what each rank called of torch.distributed, lined up across ranks.

Introduced in notebook 06 (finding the call that hangs), used again in 08 and 09 to count the
bytes each step sends. ``trace`` records the calls on every rank; ``table`` lines the
ranks' records up and flags where they disagree. Notebooks import both from the top:
``from helpers import calltrace, calltable``.
"""

from . import table, trace

__all__ = ["table", "trace"]
