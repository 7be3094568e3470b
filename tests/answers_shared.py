"""Planted answers for what every exercise is held to, whatever it asks (issue 38's shared
list): the global state a check compares before and after (autograd's mode, torch's default
dtype), an asynchronous operation never waited for (or polled once), a tensor made without
a device and passed to a call (on a GPU node it would go through gloo), and a call made through
torch.distributed.distributed_c10d's own name, which the call record must see too, and
Python's hash() of bytes, which agrees across ranks only where they share a hash seed. Each is
planted in one or two exercises; the rule behind it is the same for all (trial, core.verdict).
"""

from __future__ import annotations

from answers import RIGHT

UNWAITED = RIGHT["mean_of_all"].replace("dist.all_reduce(total)",
                                        "dist.all_reduce(total, async_op=True)")
FLOAT64 = RIGHT["my_piece"].replace("def my_piece(flat):\n", "def my_piece(flat):\n"
                                    "    torch.set_default_dtype(torch.float64)\n")

SUB_GROUP = ("    last = max(1, world_size - 1)\n"
             "    fewer = dist.new_group(list(range(last)))\n"
             "    if rank < last:\n"
             "        dist.all_reduce(one, group=fewer)\n")
WHOLE_GRADIENTS = ("    every = torch.empty(world_size * padded.numel(), dtype=grad.dtype, "
                   "device=grad.device)\n"
                   "    dist.all_gather_single(every, padded)\n"
                   "    params -= lr * every.view(world_size, -1).mean(dim=0)[:params.numel()]\n")
EVEN_SEND = "        dist.send(mine, dst=partner)\n        dist.recv"  # the even ranks' send

# (what, source, a piece of the message that names the mistake[, world size])
MORE_WRONG_SHARED: dict[str, list[tuple]] = {
    "mean_of_all": [
        ("autograd switched off for good (torch.set_grad_enabled(False))",
         RIGHT["mean_of_all"].replace("    total = x.clone()\n",
                                      "    torch.set_grad_enabled(False)\n    total = x.clone()\n"),
         "autograd's mode"),
        ("the all_reduce started asynchronously and never waited for",
         UNWAITED, "started all_reduce (asynchronous) and never waited for it"),
        ("the all_reduce never waited, at 2 ranks",
         UNWAITED, "never waited for it", 2),
        ("the all_reduce polled once with is_completed(), its answer ignored",
         RIGHT["mean_of_all"].replace("    dist.all_reduce(total)\n",
                                      "    work = dist.all_reduce(total, async_op=True)\n"
                                      "    work.is_completed()\n"),
         "started all_reduce (asynchronous) and never waited for it"),
    ],
    "my_piece": [
        ("the default dtype left at float64",
         FLOAT64, "default dtype"),
        ("a barrier through torch.distributed.distributed_c10d's own name",
         RIGHT["my_piece"].replace("def my_piece(flat):\n", "def my_piece(flat):\n"
                                   "    torch.distributed.distributed_c10d.barrier()\n"),
         "called ['barrier']: this needs no communication"),
    ],
    "in_sync": [
        ("a fingerprint by Python's hash() of the bytes (equal only where the processes share "
         "a hash seed, as forked engines do)",
         RIGHT["in_sync"].replace(
             "    digest = hashlib.sha256(flat.numpy().tobytes()).digest()\n"
             "    fingerprint = torch.tensor([int.from_bytes(digest[:8], \"little\", "
             "signed=True)], device=device)\n",
             "    fingerprint = torch.tensor([hash(flat.numpy().tobytes())], device=device)\n"),
         "hash() on str or bytes, which Python salts per process"),
    ],
    "swap_with_partner": [
        ("the even ranks send with tag 1, their partners receive with the default tag",
         RIGHT["swap_with_partner"].replace(EVEN_SEND,
                                            "        dist.send(mine, dst=partner, tag=1)\n"
                                            "        dist.recv"),
         "are already paired, yet the message never matched: rank 0 sends with tag 1, rank 1 "
         "waits for tag 0"),
        ("the send an isend never waited for, at 2 ranks",
         RIGHT["swap_with_partner"].replace(EVEN_SEND,
                                            "        dist.isend(mine, dst=partner)\n"
                                            "        dist.recv"),
         "started isend (asynchronous) and never waited for it", 2),
    ],
    "zero_sgd_step": [
        ("the reduce-scatter's shard thrown away, every rank's whole gradient all-gathered",
         RIGHT["zero_sgd_step"].split("    mine /= world_size\n")[0] + WHOLE_GRADIENTS,
         "all-gathered"),
        ("params.data rebound to the result, not written into",
         RIGHT["zero_sgd_step"].replace("    params.copy_(full[:params.numel()])",
                                        "    params.data = full[:params.numel()].clone()"),
         "params was given new memory (resize_, set_ or .data =)"),
    ],
    "global_norm": [
        ("the shard made to require grad, its norm taken by autograd",
         RIGHT["global_norm"].replace("def global_norm(shard):\n",
                                      "def global_norm(shard):\n    shard.requires_grad_(True)\n"
                                      "    shard.pow(2).sum().backward()\n"),
         "shard now requires grad"),
    ],
    "count_ranks": [
        ("all-reduced on a group it made of every rank but the last",
         RIGHT["count_ranks"].replace("    dist.all_reduce(one)\n", SUB_GROUP),
         "on a group of its own, ranks [0, 1]"),
    ],
    "pipeline_forward": [
        ("the caller's list of micro-batches emptied by pop(0)",
         RIGHT["pipeline_forward"].replace("        for mb in micro_batches:\n",
                                           "        while micro_batches:\n"
                                           "            mb = micro_batches.pop(0)\n"),
         "changed the caller's list micro_batches (it held"),
    ],
    "row_parallel_forward": [
        ("the whole activation and weight rebuilt by one all_reduce of zero-padded shards", '''
def row_parallel_forward(h_part, w_part, bias):
    k, b, d_out = h_part.shape[1], h_part.shape[0], w_part.shape[0]
    h = torch.zeros(b, k * world_size, dtype=h_part.dtype, device=h_part.device)
    w = torch.zeros(d_out, k * world_size, dtype=w_part.dtype, device=w_part.device)
    h[:, rank * k:(rank + 1) * k] = h_part
    w[:, rank * k:(rank + 1) * k] = w_part
    packed = torch.cat([h.reshape(-1), w.reshape(-1)])
    dist.all_reduce(packed)
    h, w = packed[:h.numel()].view_as(h), packed[h.numel():].view_as(w)
    return h @ w.T + bias''', "the one all_reduce carries this rank's partial output"),
    ],
    "column_parallel_backward": [
        ("the whole output gradient and weight rebuilt by one all_reduce", '''
def column_parallel_backward(x, w_part, grad_out_part):
    k, b, d_in = w_part.shape[0], x.shape[0], x.shape[1]
    g = torch.zeros(b, k * world_size, dtype=x.dtype, device=x.device)
    w = torch.zeros(k * world_size, d_in, dtype=x.dtype, device=x.device)
    g[:, rank * k:(rank + 1) * k] = grad_out_part
    w[rank * k:(rank + 1) * k] = w_part
    packed = torch.cat([g.reshape(-1), w.reshape(-1)])
    dist.all_reduce(packed)
    g, w = packed[:g.numel()].view_as(g), packed[g.numel():].view_as(w)
    return g @ w, grad_out_part.T @ x''', "carries this rank's part of the input's gradient"),
    ],
    "ring_all_gather": [
        ("sized for the lesson's chunks of 2 numbers",
         RIGHT["ring_all_gather"].replace("    n, size = world_size, chunk.numel()\n",
                                          "    n, size = world_size, 2\n"),
         "ring_all_gather raised RuntimeError: The expanded size"),
    ],
    "ring_sum": [
        ("of each step's sends and receives, only the receive waited for",
         RIGHT["ring_sum"].replace("        for req in dist.batch_isend_irecv(ops):\n"
                                   "            req.wait()\n",
                                   "        reqs = dist.batch_isend_irecv(ops)\n"
                                   "        reqs[1].wait()\n"),
         "started batch_isend_irecv (asynchronous) and never waited for it"),
    ],
}

# a tensor made without a device and passed to a call: on a GPU node it would go through gloo
MORE_WRONG_SHARED["count_ranks"].append(
    ("torch.ones(1) with no device (on a GPU node: gloo, not NCCL)",
     RIGHT["count_ranks"].replace("torch.ones(1, device=device)", "torch.ones(1)"),
     "a tensor made without a device"))
MORE_WRONG_SHARED["swap_with_partner"].append(
    ("the partner's tensor received into torch.zeros(shape), no device",
     RIGHT["swap_with_partner"].replace("theirs = torch.empty_like(mine)",
                                        "theirs = torch.zeros(mine.shape, dtype=mine.dtype)"),
     "passed recv a tensor made without a device", 4))

MORE_WRONG_SHARED["my_piece"].append(
    ("the piece cut from a padded copy made with no device",
     RIGHT["my_piece"].replace(", device=flat.device", "").replace(".clone()", ""),
     "returned a tensor made without a device", 4))

ALSO_RIGHT_SHARED: dict[str, list[tuple[str, str]]] = {
    "mean_of_all": [
        ("asynchronous, waited through its future; autograd off inside no_grad only", '''
def mean_of_all(x):
    with torch.no_grad():
        total = x.clone()
    work = dist.all_reduce(total, async_op=True)
    work.get_future().wait()
    return total / world_size
'''),
        ("asynchronous, polled until is_completed()", '''
def mean_of_all(x):
    total = x.clone()
    work = dist.all_reduce(total, async_op=True)
    while not work.is_completed():
        pass
    return total / world_size
'''),
    ],
}

for _name, _planted in MORE_WRONG_SHARED.items():  # each replace() found the text it plants in
    assert all(p[1] != RIGHT[_name] for p in _planted), _name
