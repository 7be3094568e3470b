"""More answers to the exercises of notebook 06, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones.

Kinds of wrong answer added here: a deadlock at 2 ranks (everyone sends first), right only at
one world size (a ring of 4 hard-coded, a sum compared with 4), the wrong type or dtype (a
tensor, an int, bfloat16 tokens), the forbidden means (isend never waited, object lists, a
barrier, point-to-point agreement), right on some ranks only (a chain without its wrap-around,
rank 0's flag broadcast), a race (the agreement's all-reduce never waited), side effects (the
environment, torch's default dtype), and for first_mismatch the requirements of the text (the
ranks sorted, the arguments left as they were, seq numbers as the records give them).
"""

from __future__ import annotations

from answers import FIRST_MISMATCH_RIGHT, RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- exercise 2: ring_exchange ---------------------------------------------------------------
_RING = RIGHT["ring_exchange"]
ALSO_RIGHT["ring_exchange"] = [
    ("rank 0 sends first, every other rank receives first; keywords, the world by name", '''
def ring_exchange(token):
    right = (rank + 1) % world_size
    left = (rank - 1) % world_size
    mine = torch.tensor([float(token)])
    got = torch.empty(1)
    if rank == 0:
        dist.send(tensor=mine, dst=right, group=dist.group.WORLD)
        dist.recv(tensor=got, src=left, group=dist.group.WORLD)
    else:
        dist.recv(tensor=got, src=left, group=dist.group.WORLD)
        dist.send(tensor=mine, dst=right, group=dist.group.WORLD)
    return float(got)
'''),
    ("odd ranks send first, float64 tensors by dtype=, a tag", '''
def ring_exchange(token):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    mine = torch.tensor([token], dtype=torch.float64)
    got = torch.zeros_like(mine)
    if rank % 2:
        dist.send(mine, right, tag=7)
        dist.recv(got, left, tag=7)
    else:
        dist.recv(got, left, tag=7)
        dist.send(mine, right, tag=7)
    return got.item()
'''),
]
MORE_WRONG["ring_exchange"] = [
    ("everyone sends first (a cycle of waiting sends)", _RING.replace("rank % 2 == 0", "True"),
     "a deadlock at world size 2: rank 0 waits in send to rank 1, rank 1 waits in send to "
     "rank 0", 2),
    ("a ring of 4 hard-coded", _RING.replace("% world_size", "% 4"),
     "at world size 3, rank 2: ring_exchange raised ValueError: rank 2: send to rank 3", 4),
    ("the left neighbour without % world_size", _RING.replace("(rank - 1) % world_size",
                                                             "rank - 1"),
     "recv from rank -1"),
    ("the received tensor, not a float", _RING.replace("return got.item()", "return got"),
     "ring_exchange gave a float32 tensor", 2),
    ("an isend posted first, waited after the recv", '''
def ring_exchange(token):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    got = torch.zeros(1)
    request = dist.isend(torch.tensor([token]), dst=right)
    dist.recv(got, src=left)
    request.wait()
    return got.item()''', "called ['isend']: blocking dist.send and dist.recv only"),
    ("send_object_list and recv_object_list", '''
def ring_exchange(token):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    got = [None]
    if rank % 2 == 0:
        dist.send_object_list([token], dst=right)
        dist.recv_object_list(got, src=left)
    else:
        dist.recv_object_list(got, src=left)
        dist.send_object_list([token], dst=right)
    return got[0]''', "called ['recv_object_list', 'send_object_list']: blocking dist.send"),
    ("a barrier after, to be safe", _RING.replace(
        "    return got.item()", "    dist.barrier()\n    return got.item()"),
     "called ['barrier']: point-to-point calls only"),
    *[("float64 as torch's default dtype", _RING.replace(
        "    right, left", "    torch.set_default_dtype(torch.float64)\n    right, left"),
       "ring_exchange changed torch's default dtype (torch.set_default_dtype), now float64",
       size) for size in (2, 3)],
    ("bfloat16 tensors: the token rounded", _RING.replace(
        'torch.tensor([token], device="cpu")', 'torch.tensor([token], dtype=torch.bfloat16)')
     .replace('torch.zeros(1, device="cpu")', 'torch.zeros(1, dtype=torch.bfloat16)'),
     "at world size 3, rank 0: ring_exchange gave 68608.0 (a float), expected 68419.0"),
    ("a chain without the wrap-around: rank 0 keeps its own token", '''
def ring_exchange(token):
    got = torch.tensor([token])
    if rank > 0:
        dist.recv(got, src=rank - 1)
    if rank < world_size - 1:
        dist.send(torch.tensor([token]), dst=rank + 1)
    return got.item()''', "rank 2: sent to [] and received from [1]: one dist.send to the right"),
    ("TORCH_DISTRIBUTED_DEBUG set on the way", _RING.replace(
        "    right, left", "    import os\n    os.environ['TORCH_DISTRIBUTED_DEBUG'] = 'DETAIL'"
        "\n    right, left"), "ring_exchange changed the environment (os.environ)"),
]

# ---- exercise 1: skip_together ---------------------------------------------------------------
_SKIP = RIGHT["skip_together"]
ALSO_RIGHT["skip_together"] = [
    ("every rank's flag gathered, then all()", '''
def skip_together(batch_ok):
    flags = [torch.zeros(1, device=device) for _ in range(world_size)]
    dist.all_gather(flags, torch.tensor([float(batch_ok)], device=device))
    if not all(f.item() == 1.0 for f in flags):
        return None
    ones = torch.ones(1, device=device)
    dist.all_reduce(ones)
    return float(ones)
'''),
    ("the bad batches counted; keywords, the world by name, a request waited on", '''
def skip_together(batch_ok):
    bad = torch.tensor([0 if batch_ok else 1], device=device)
    dist.all_reduce(tensor=bad, op=dist.ReduceOp.SUM, group=dist.group.WORLD,
                    async_op=True).wait()
    if bad.item() > 0:
        return None
    ones = torch.ones(1, device=device)
    dist.all_reduce(tensor=ones, group=dist.group.WORLD)
    return ones.item()
'''),
]
MORE_WRONG["skip_together"] = [
    ("MAX instead of MIN: skips only if every batch is bad", _SKIP.replace(
        "ReduceOp.MIN", "ReduceOp.MAX"),
     "skip_together gave 2.0 (a float), expected None (a NoneType)", 2),
    ("the tensor, not a float", _SKIP.replace("return t.item()", "return t"),
     "skip_together gave a float32 tensor [2.0], expected 2.0 (a float)", 2),
    ("an int", _SKIP.replace("return t.item()", "return int(t.item())"),
     "skip_together gave 3 (an int), expected 3.0 (a float)"),
    ("the agreement's all-reduce never waited (a race)", _SKIP.replace(
        "op=dist.ReduceOp.MIN)", "op=dist.ReduceOp.MIN, async_op=True)"),
     "started all_reduce (asynchronous) and never waited for it"),
    ("the flags summed and compared with 4", '''
def skip_together(batch_ok):
    ok = torch.tensor([float(batch_ok)], device=device)
    dist.all_reduce(ok)
    if ok.item() != 4:
        return None
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return t.item()''', "at world size 3, rank 0: skip_together gave None (a NoneType), "
     "expected 3.0 (a float)", 4),
    ("agreed through rank 0 by send and recv", '''
def skip_together(batch_ok):
    ok = torch.tensor([float(batch_ok)])
    if rank == 0:
        for src in range(1, world_size):
            other = torch.zeros(1)
            dist.recv(other, src=src)
            ok = torch.minimum(ok, other)
        for dst in range(1, world_size):
            dist.send(ok, dst=dst)
    else:
        dist.send(ok, dst=0)
        dist.recv(ok, src=0)
    if ok.item() == 0.0:
        return None
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return t.item()''', "called ['recv', 'send']: collectives only"),
    ("rank 0's flag broadcast: its batch alone decides", _SKIP.replace(
        "dist.all_reduce(ok, op=dist.ReduceOp.MIN)", "dist.broadcast(ok, src=0)"),
     "(a float), expected None (a NoneType)"),
    ("TORCH_DISTRIBUTED_DEBUG set on the way", _SKIP.replace(
        "    ok = ", "    import os\n    os.environ['TORCH_DISTRIBUTED_DEBUG'] = 'DETAIL'\n"
        "    ok = "),
     "skip_together changed the environment (os.environ)"),
    ("a barrier first, to line the ranks up", _SKIP.replace("    ok = ",
                                                             "    dist.barrier()\n    ok = "),
     "made 3 collective calls ['barrier', 'all_reduce', 'all_reduce'] with every batch fine"),
    ("float64 as torch's default dtype", _SKIP.replace(
        "    ok = ", "    torch.set_default_dtype(torch.float64)\n    ok = "),
     "skip_together changed torch's default dtype (torch.set_default_dtype), now float64"),
]

# ---- exercise 3: first_mismatch, in the notebook ---------------------------------------------
IN_NOTEBOOK_ALSO_RIGHT["first_mismatch"] = [
    ("the ranks present per number as sets, the usual call by max over the counts", '''
def first_mismatch(traces):
    by_seq = {}
    for r, t in traces.items():
        for e in t:
            by_seq.setdefault(e["seq"], {})[r] = (e["op"], tuple(e["shapes"]))
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        if len(calls) < len(traces):
            return seq, sorted(set(traces) - set(calls))
        counts = {}
        for key in calls.values():
            counts[key] = counts.get(key, 0) + 1
        if len(counts) > 1:
            usual = max(counts, key=counts.get)
            return seq, sorted(r for r, key in calls.items() if key != usual)
    return None
'''),
]
IN_NOTEBOOK_MORE_WRONG["first_mismatch"] = [
    ("a rank that never made the call and one that made another blamed together", '''
def first_mismatch(traces):
    by_seq = {}
    for r, t in traces.items():
        for e in t:
            by_seq.setdefault(e["seq"], {})[r] = (e["op"], tuple(e["shapes"]))
    for seq in sorted(by_seq):
        calls = by_seq[seq]
        counts = {}
        for key in calls.values():
            counts[key] = counts.get(key, 0) + 1
        usual = max(counts, key=counts.get)
        blamed = sorted(set(traces) - set(calls)) + [r for r, k in calls.items() if k != usual]
        if blamed:
            return seq, sorted(blamed)
    return None''', "expected"),
    ("the ranks in the order the records came", FIRST_MISMATCH_RIGHT.replace(
        "return seq, sorted(r for r, k in keys.items() if k != usual)",
        "return seq, [r for r, k in keys.items() if k != usual]").replace(
        "missing = sorted(", "missing = list("), "the right ranks, not sorted"),
    ("missing calls looked for in the whole record first, differences after", '''
from collections import Counter

def first_mismatch(traces):
    numbers = sorted({e["seq"] for t in traces.values() for e in t})
    for seq in numbers:
        have = {r for r, t in traces.items() if any(e["seq"] == seq for e in t)}
        if len(have) < len(traces):
            return seq, sorted(set(traces) - have)
    for seq in numbers:
        keys = {r: next((e["op"], e["shapes"]) for e in t if e["seq"] == seq)
                for r, t in traces.items()}
        counts = Counter(keys.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            return seq, sorted(r for r, k in keys.items() if k != usual)
    return None''', "returned item 0: "),
    ("the numbers made to start at 0, in the records themselves", '''
from collections import Counter

def first_mismatch(traces):
    start = min((e["seq"] for t in traces.values() for e in t), default=0)
    for t in traces.values():
        for e in t:
            e["seq"] -= start
    n = max(len(t) for t in traces.values())
    for seq in range(n):
        calls = {r: next((e for e in t if e["seq"] == seq), None) for r, t in traces.items()}
        missing = sorted(r for r, e in calls.items() if e is None)
        if missing:
            return seq + start, missing
        keys = {r: (e["op"], e["shapes"]) for r, e in calls.items()}
        counts = Counter(keys.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            return seq + start, sorted(r for r, k in keys.items() if k != usual)
    return None''', "changed its arguments: leave them as they were"),
    ("ranks 0 to 3 hard-coded", FIRST_MISMATCH_RIGHT.replace(
        'calls = {r: next((e for e in t if e["seq"] == seq), None) for r, t in traces.items()}',
        'calls = {r: next((e for e in traces[r] if e["seq"] == seq), None) for r in range(4)}'),
     "raised KeyError"),
    ("a tuple of ranks", FIRST_MISMATCH_RIGHT.replace(
        "return seq, missing", "return seq, tuple(missing)").replace(
        "return seq, sorted(r for r, k in keys.items() if k != usual)",
        "return seq, tuple(sorted(r for r, k in keys.items() if k != usual))"),
     "(a tuple), expected ["),
    ("a list, not a tuple", FIRST_MISMATCH_RIGHT.replace(
        "return seq, missing", "return [seq, missing]").replace(
        "return seq, sorted(r for r, k in keys.items() if k != usual)",
        "return [seq, sorted(r for r, k in keys.items() if k != usual)]"),
     "(a list), expected ("),
    ("the majority blamed", FIRST_MISMATCH_RIGHT.replace("if k != usual", "if k == usual"),
     "returned item 1: "),
    ("every field of the entries compared, not the operation and shapes alone", '''
from collections import Counter

def first_mismatch(traces):
    numbers = sorted({e["seq"] for t in traces.values() for e in t})
    for seq in numbers:
        calls = {r: next((e for e in t if e["seq"] == seq), None) for r, t in traces.items()}
        missing = sorted(r for r, e in calls.items() if e is None)
        if missing:
            return seq, missing
        keys = {r: tuple(sorted(e.items())) for r, e in calls.items()}
        counts = Counter(keys.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            return seq, sorted(r for r, k in keys.items() if k != usual)
    return None''', "(a tuple), expected None (a NoneType)"),
]
