"""Made-up values for the unit tests: call records as helpers.calls.trace writes them."""

from __future__ import annotations


def entry(op, seq, *, shapes=((4,),), peer=None, state="done", kind="collective",
          group="world", ranks=(0, 1, 2), n=0, parts=()):
    """One record, as helpers.calls.trace writes it."""
    return {"n": n, "op": op, "kind": kind, "group": group, "group_ranks": ranks, "seq": seq,
            "shapes": shapes, "dtype": "float32", "peer": peer, "parts": parts,
            "async": False, "state": state, "error": None, "start": 0.0, "seconds": 0.0}


def same_on(ranks, *ops):
    """Each rank made the same collectives, in order."""
    return {r: [entry(op, i, n=i) for i, op in enumerate(ops)] for r in ranks}
