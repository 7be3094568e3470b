"""Line up the call records of all ranks by sequence number and flag where they disagree.

Introduced in notebook 06. ``rows(traces)`` turns the records that ``helpers.calls.trace.fetch``
pulled from every rank into rows: one row per collective (the n-th collective of a group, on
every rank), and before it the point-to-point calls made since the previous collective.
A row gets a problem when ranks disagree: a rank that never made the call, different
operations, shapes, dtypes or roots, or a receive that no rank's send matches.
``table(traces)`` prints the rows; ``helpers.figures.plot_calls(traces)`` draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..text import table as text_table
from .trace import SENDS

Entry = dict[str, Any]
Traces = dict[int, "list[Entry] | str"]

SAME_SHAPE = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
              "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
              "reduce_scatter_single", "all_reduce_coalesced")
DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
          "int64": "i64", "int32": "i32", "uint8": "u8", "int8": "i8", "bool": "bool"}
ARROWS = {"send": "→", "isend": "→", "send_object_list": "→",
          "recv": "←", "irecv": "←", "recv_object_list": "←"}
STATES = {"done": "", "issued": "", "failed": " ✗", "running": " …"}


@dataclass
class Row:
    """One line of the table: the same call (by sequence number) on every rank of a group."""

    group: str
    label: str
    cells: dict[int, Entry | None]
    problem: str | None = None
    ranks: tuple[int, ...] = field(default=())


def rows(traces: Traces) -> list[Row]:
    """Every group's calls in order: p2p calls, then the collective they precede."""
    available = {r: t for r, t in traces.items() if isinstance(t, list)}
    out: list[Row] = []
    for group in sorted({e["group"] for t in available.values() for e in t},
                        key=lambda g: (g != "world", g)):
        entries = {r: [e for e in t if e["group"] == group] for r, t in available.items()}
        ranks = next(e["group_ranks"] for t in entries.values() for e in t)
        entries = {r: es for r, es in entries.items() if r in ranks}
        truncated = {r for r, t in available.items() if t and t[0]["n"] > 0}
        out += _group_rows(group, tuple(ranks), entries, truncated)
    return out


def _group_rows(group: str, ranks: tuple[int, ...], entries: dict[int, list[Entry]],
                truncated: set[int]) -> list[Row]:
    """The rows of one group, each checked for disagreement between ranks.

    A rank whose record lost its oldest entries (the deque is bounded) is only compared from
    its first remaining entry on.
    """
    last = max((e["seq"] for es in entries.values() for e in es), default=-1)
    first = {r: min((e["seq"] for e in es), default=last + 1) if r in truncated else 0
             for r, es in entries.items()}
    out = []
    for seq in range(min(first.values(), default=0), last + 1):
        p2p = {r: [e for e in es if e["kind"] == "p2p" and e["seq"] == seq]
               for r, es in entries.items()}
        depth = max((len(v) for v in p2p.values()), default=0)
        segment = [Row(group, "p2p", {r: (v[i] if i < len(v) else None) for r, v in p2p.items()},
                       ranks=ranks) for i in range(depth)]
        if segment:
            segment[-1].problem = p2p_problem(p2p)
        out += segment
        coll = {r: next((e for e in es if e["kind"] == "collective" and e["seq"] == seq), None)
                for r, es in entries.items()}
        if any(coll.values()):
            known = {r: e for r, e in coll.items() if first[r] <= seq}
            out.append(Row(group, str(seq), coll, collective_problem(known), ranks))
    return out


def collective_problem(cells: dict[int, Entry | None]) -> str | None:
    """Why the ranks' n-th collective does not match, or None if it does."""
    missing = [r for r, e in cells.items() if e is None]
    if missing:
        return f"rank(s) {missing} never made this call"
    for what, key in (("operations", "op"), ("dtypes", "dtype"), ("roots", "peer")):
        values = {r: e[key] for r, e in cells.items()}
        if len(set(values.values())) > 1:
            return f"different {what}: " + ", ".join(f"rank {r} {v}" for r, v in values.items())
    if next(iter(cells.values()))["op"] in SAME_SHAPE:
        shapes = {r: e["shapes"] for r, e in cells.items()}
        if len({repr(s) for s in shapes.values()}) > 1:
            return "different shapes: " + ", ".join(
                f"rank {r} {_shapes(s)}" for r, s in shapes.items())
    return None


def _parts(rank: int, entry: Entry) -> list[tuple[str, int | None, Any]]:
    """(send|recv, peer, shape) of each point-to-point transfer in one entry."""
    if entry["op"] == "batch_isend_irecv":
        return [("send" if op == "isend" else "recv", peer, shape)
                for op, peer, shape in entry["parts"]]
    shape = entry["shapes"][0] if entry["shapes"] else None
    return [("send" if entry["op"] in SENDS else "recv",
             entry["peer"], shape)]


def p2p_problem(calls: dict[int, list[Entry]]) -> str | None:
    """The first send or receive between two collectives that no other rank's call matches."""
    parts = {r: [p for e in es for p in _parts(r, e)] for r, es in calls.items()}
    for rank, mine in parts.items():
        for kind, peer, shape in mine:
            if peer not in parts:
                continue  # a peer outside the record (or any source): nothing to compare
            other = "recv" if kind == "send" else "send"
            if not any(k == other and p in (rank, None) and s == shape for k, p, s in parts[peer]):
                verb = "sends to" if kind == "send" else "receives from"
                return f"rank {rank} {verb} rank {peer}, which makes no matching {other}"
    return None


def _shapes(shapes: Any) -> str:
    """Shapes as text: [4], 4×[3] for a list of equal shapes, (a, b) for several arguments."""
    def one(s: Any) -> str:
        if isinstance(s, list):
            return f"{len(s)}×{one(s[0])}" if len(set(s)) == 1 else "/".join(map(one, s))
        return "[" + ",".join(map(str, s)) + "]"

    return one(shapes[0]) if len(shapes) == 1 else "(" + ", ".join(map(one, shapes)) + ")"


def describe(entry: Entry | None) -> str:
    """One cell of the table: operation, peer or root, dtype and shapes, and how it ended."""
    if entry is None:
        return "—"
    op, peer = entry["op"], entry["peer"]
    if op == "batch_isend_irecv":
        text = "batch[" + " ".join(f"{ARROWS[o]}{p}" for o, p, _ in entry["parts"]) + "]"
    elif op in ARROWS:
        text = f"{op}{ARROWS[op]}{'any' if peer is None else peer}"
    else:
        text = op if peer is None else f"{op}({peer})"
    if entry["shapes"]:
        text += f" {DTYPES.get(entry['dtype'], entry['dtype'])}{_shapes(entry['shapes'])}"
    return text + STATES.get(entry["state"], f" {entry['state']}")


def table(traces: Traces, last: int = 12) -> str:
    """The last rows as text: one column per rank, ≠ on rows where the ranks disagree."""
    selected = rows(traces)[-last:]
    ranks = sorted(traces)
    header = ["group", "seq", ""] + [
        f"rank {r}" + ("" if isinstance(traces[r], list) else f" ({traces[r]})") for r in ranks]
    lines = [header] + [
        [row.group, row.label, "≠" if row.problem else ""]
        + [describe(row.cells.get(r)) if r in row.cells else "" for r in ranks]
        for row in selected]
    problems = [f"  {row.group} {row.label}: {row.problem}" for row in selected if row.problem]
    notes = ["(✗ failed, … did not return, — no such call)"]
    notes += ["mismatch:", *problems] if problems else ["no mismatch"]
    return "\n".join([text_table(lines), *notes])
