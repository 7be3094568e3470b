"""More answers to the exercises of notebook 09, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones."""

from __future__ import annotations

from answers import RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}

# ---- exercise 1: row_parallel_forward ------------------------------------------------------
_ROW = RIGHT["row_parallel_forward"]
ALSO_RIGHT["row_parallel_forward"] = [
    ("the bias shared out among the ranks before the sum, keyword arguments", '''
def row_parallel_forward(h_part, w_part, bias):
    out = torch.addmm(bias / world_size, h_part, w_part.t())
    dist.all_reduce(tensor=out, op=dist.ReduceOp.SUM, group=dist.group.WORLD)
    return out
'''),
]
ALSO_RIGHT["row_parallel_forward"] += [
    ("the whole bias added on rank 0 before the sum", '''
def row_parallel_forward(h_part, w_part, bias):
    out = h_part @ w_part.T
    if rank == 0:
        out += bias
    dist.all_reduce(out)
    return out
'''),
]
MORE_WRONG["row_parallel_forward"] = [
    ("world_size times the partial output, averaged (ReduceOp.AVG): the right sum, another "
     "payload", _ROW.replace("    dist.all_reduce(partial)\n",
                             "    partial *= world_size\n"
                             "    dist.all_reduce(partial, op=dist.ReduceOp.AVG)\n"),
     "that are not this rank's partial output"),
    ("one buffer kept between calls and returned each time", '''
_out = torch.empty(0)

def row_parallel_forward(h_part, w_part, bias):
    _out.resize_(h_part.shape[0], w_part.shape[0])
    torch.matmul(h_part, w_part.T, out=_out)
    dist.all_reduce(_out)
    return _out.add_(bias)''', "wrote into"),
    ("the bias divided by a hard-coded 2: right at 2 ranks only", '''
def row_parallel_forward(h_part, w_part, bias):
    out = h_part @ w_part.T + bias / 2
    dist.all_reduce(out)
    return out''', "at world size 1", 2),
    ("reduced to rank 0 only", _ROW.replace("dist.all_reduce(partial)",
                                            "dist.reduce(partial, dst=0)"),
     "rank 1: row_parallel_forward gave"),
    ("reduce, then broadcast: two collectives", _ROW.replace(
        "dist.all_reduce(partial)",
        "dist.reduce(partial, dst=0)\n    dist.broadcast(partial, src=0)"),
     "made 2 collective calls"),
    ("the bias shared out in place: the input changed", '''
def row_parallel_forward(h_part, w_part, bias):
    bias /= world_size
    out = h_part @ w_part.T + bias
    dist.all_reduce(out)
    return out''', "changed the caller's bias in place"),
    ("a sum around a ring of sends and receives", '''
def row_parallel_forward(h_part, w_part, bias):
    total = h_part @ w_part.T
    passing = total.clone()
    for _ in range(world_size - 1):
        incoming = torch.empty_like(passing)
        if rank % 2 == 0:
            dist.send(passing, dst=(rank + 1) % world_size)
            dist.recv(incoming, src=(rank - 1) % world_size)
        else:
            dist.recv(incoming, src=(rank - 1) % world_size)
            dist.send(passing, dst=(rank + 1) % world_size)
        total += incoming
        passing = incoming
    return total + bias''', "one collective, no point-to-point call", 2),
    ("in double precision", _ROW.replace("return partial + bias",
                                         "return (partial + bias).double()"),
     "expected float32"),
    ("the global generator reseeded", _ROW.replace(
        "    partial = h_part", "    torch.manual_seed(0)\n    partial = h_part"),
     "changed torch's random generator"),
]

# ---- exercise 2: column_parallel_backward --------------------------------------------------
_COL = RIGHT["column_parallel_backward"]
ALSO_RIGHT["column_parallel_backward"] = [
    ("torch.matmul and a tuple, the request waited on", '''
def column_parallel_backward(x, w_part, grad_out_part):
    grad_w = torch.matmul(grad_out_part.transpose(0, 1), x)
    grad_x = torch.matmul(grad_out_part, w_part)
    dist.all_reduce(grad_x, async_op=True).wait()
    return (grad_x, grad_w)
'''),
]
MORE_WRONG["column_parallel_backward"] = [
    ("world_size times its part of grad_x, averaged (ReduceOp.AVG): the right sum, another "
     "payload", _COL.replace("    dist.all_reduce(grad_x)\n",
                             "    grad_x = grad_x * world_size\n"
                             "    dist.all_reduce(grad_x, op=dist.ReduceOp.AVG)\n"),
     "that are not this rank's part of the input's gradient", 4),
    ("AVG times a hard-coded 2: right at 2 ranks only", _COL.replace(
        "dist.all_reduce(grad_x)",
        "dist.all_reduce(grad_x, op=dist.ReduceOp.AVG)\n    grad_x *= 2"),
     "at world size 1", 2),
    ("the weight's gradient transposed", _COL.replace("grad_out_part.T @ x",
                                                      "x.T @ grad_out_part"), "of shape"),
    ("the input's gradient only", _COL.replace("return [grad_x, grad_out_part.T @ x]",
                                               "return grad_x"), "] (a list)"),
    ("the incoming gradient scaled in place, then AVG", '''
def column_parallel_backward(x, w_part, grad_out_part):
    grad_out_part *= world_size
    grad_x = grad_out_part @ w_part
    dist.all_reduce(grad_x, op=dist.ReduceOp.AVG)
    return [grad_x, grad_out_part.T @ x / world_size]''',
     "changed the caller's grad_out_part in place"),
    ("all_gather of the partial gradients, summed", '''
def column_parallel_backward(x, w_part, grad_out_part):
    mine = grad_out_part @ w_part
    parts = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(parts, mine)
    return [sum(parts), grad_out_part.T @ x]''', "one all_reduce is all it takes"),
    ("the environment written", '''
import os

''' + _COL.replace("    return", "    os.environ['TP_DONE'] = '1'\n    return"),
     "changed the environment (os.environ)"),
]

# ---- exercise 3: pipeline_forward ----------------------------------------------------------
_PIPE = RIGHT["pipeline_forward"]
ALSO_RIGHT["pipeline_forward"] = [
    ("received into the given zeros, as the text allows", RIGHT["pipeline_forward"].replace(
        "            a = torch.empty_like(mb)\n", "            a = mb\n")),
    ("the whole function under @torch.no_grad(), blocking calls", '''
@torch.no_grad()
def pipeline_forward(stage, micro_batches):
    outputs = []
    for mb in micro_batches:
        a = mb
        if rank > 0:
            a = torch.empty_like(mb)
            dist.recv(a, src=rank - 1)
        out = stage(a)
        if rank < world_size - 1:
            dist.send(out, dst=rank + 1)
        else:
            outputs.append(out)
    return outputs
'''),
    ("GPipe-like: receive every micro-batch, then send them all, waited isends", '''
def pipeline_forward(stage, micro_batches):
    first, last = rank == 0, rank == world_size - 1
    inputs = list(micro_batches) if first else [torch.zeros_like(mb) for mb in micro_batches]
    if not first:
        for buffer in inputs:
            dist.recv(tensor=buffer, src=rank - 1)
    with torch.no_grad():
        outs = [stage(a) for a in inputs]
    if last:
        return outs
    for work in [dist.isend(out, dst=rank + 1) for out in outs]:
        work.wait()
    return []
'''),
]
MORE_WRONG["pipeline_forward"] = [
    ("a tuple of outputs", RIGHT["pipeline_forward"].replace("    return outputs",
                                                            "    return tuple(outputs)"),
     "a list, please"),
    ("without torch.no_grad(): the outputs carry a graph", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    for mb in micro_batches:
        a = mb if rank == 0 else torch.empty_like(mb)
        if rank > 0:
            dist.recv(a, src=rank - 1)
        out = stage(a)
        if rank < world_size - 1:
            dist.send(out.detach(), dst=rank + 1)
        else:
            outputs.append(out)
    return outputs''', "autograd graph"),
    ("rank 0's micro-batches overwritten with its stage's output", RIGHT["pipeline_forward"]
     .replace("            out = stage(a)\n", "            out = stage(a)\n"
              "            if rank == 0:\n                mb.copy_(out)\n"),
     "changed rank 0's micro-batches"),
    ("the stage's parameters frozen for good", RIGHT["pipeline_forward"].replace(
        "    outputs = []", "    stage.requires_grad_(False)\n    outputs = []"),
     "requires_grad of the stage"),
    ("rank 0 always sends on: one rank alone, first and last stage, returns nothing", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            if rank == 0:
                dist.send(stage(mb), dst=1)
                continue
            a = torch.empty_like(mb)
            dist.recv(a, src=rank - 1)
            out = stage(a)
            if rank < world_size - 1:
                dist.send(out, dst=rank + 1)
            else:
                outputs.append(out)
    return outputs''', "at world size 1"),
    ("only two stages, first and last: right at 2 ranks only", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            if rank == 0:
                dist.send(stage(mb), dst=1)
            else:
                a = torch.empty_like(mb)
                dist.recv(a, src=0)
                outputs.append(stage(a))
    return outputs''', "at world size 1", 2),
    ("the outputs in reverse order", _PIPE.replace("return outputs", "return outputs[::-1]"),
     "pipeline_forward gave"),
    ("every rank returns its own outputs", _PIPE.replace(
        "            else:\n                outputs.append(out)",
        "            outputs.append(out)"),
     "expected []"),
    ("one message of all micro-batches together", '''
def pipeline_forward(stage, micro_batches):
    with torch.no_grad():
        a = torch.cat(micro_batches)
        if rank > 0:
            dist.recv(a, src=rank - 1)
        out = stage(a)
        if rank < world_size - 1:
            dist.send(out, dst=rank + 1)
            return []
    return list(out.split(len(micro_batches[0])))''', "one per micro-batch"),
    ("one receive buffer for every micro-batch, all received before use", '''
def pipeline_forward(stage, micro_batches):
    outputs, buffer = [], torch.empty_like(micro_batches[0])
    with torch.no_grad():
        received = micro_batches if rank == 0 else []
        if rank > 0:
            for work in [dist.irecv(buffer, src=rank - 1) for _ in micro_batches]:
                work.wait()
            received = [buffer] * len(micro_batches)
        for a in received:
            out = stage(a)
            if rank < world_size - 1:
                dist.send(out, dst=rank + 1)
            else:
                outputs.append(out)
    return outputs''', "pipeline_forward gave"),
    ("rank 0 sends the inputs straight to every stage", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            a = mb.clone()
            if rank == 0:
                for r in range(1, world_size):
                    dist.send(mb, dst=r)
            else:
                dist.recv(a, src=0)
            out = stage(a)
            if rank == world_size - 1:
                outputs.append(out)
    return outputs''', "sent to rank(s)"),
    ("the global generator reseeded", _PIPE.replace(
        "    outputs = []", "    torch.manual_seed(rank)\n    outputs = []"),
     "changed torch's random generator"),
]

# ---- step 1's classes reused: without a group they take the default group, which during a
# check is the check's own group, so they are right at every size ----
_LESSON_CLASSES = '''
class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group=None):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None
'''
ALSO_RIGHT["row_parallel_forward"].append(
    ("step 1's ReduceFromTP reused", _LESSON_CLASSES + '''
def row_parallel_forward(h_part, w_part, bias):
    return ReduceFromTP.apply(h_part @ w_part.T) + bias'''))
ALSO_RIGHT["column_parallel_backward"].append(
    ("step 1's CopyToTP reused, through autograd", _LESSON_CLASSES + '''
def column_parallel_backward(x, w_part, grad_out_part):
    x = x.detach().requires_grad_()
    w = w_part.detach().requires_grad_()
    torch.nn.functional.linear(CopyToTP.apply(x), w).backward(grad_out_part)
    return [x.grad, w.grad]'''))

# batch_isend_irecv as the first call on the check's (new) group on some ranks only: undefined
# on NCCL (its docstring), run by gloo all the same
_BLOCKING = next(source for what, source in ALSO_RIGHT["pipeline_forward"]
                 if what.startswith("the whole function under @torch.no_grad()"))
MORE_WRONG["pipeline_forward"].append(
    ("batched sends met by plain blocking receives", _BLOCKING.replace(
        "            dist.send(out, dst=rank + 1)\n",
        "            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, rank + 1)]):\n"
        "                w.wait()\n"),
     "first call on the group is batch_isend_irecv on rank 0 but recv on rank 1"))
