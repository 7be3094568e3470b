"""Data x tensor x pipeline parallelism composed on one DeviceMesh, against one process.

A small character-level GPT (text: scikit-learn's data set descriptions, which the package
ships under its BSD licence) is trained for a few steps on the course's cluster with PyTorch's
own pieces, all on one mesh of shape (pp, dp, tp):
  - FSDP2 (`fully_shard`) along dp,
  - tensor parallelism (`parallelize_module`: q, k, v and fc1 column-wise, o and fc2
    row-wise) along tp,
  - a pipeline (`torch.distributed.pipelining`, interleaved 1F1B with two stages per rank)
    along pp;
and, in this process, by the same model, from the same initial weights, on the same batches.
Prints each rank's largest difference in loss and in weights after the steps, and the seconds
per step. Asserts nothing: it is the ground notebook 11 will stand on (issue 37). With SGD the
weights agree to rounding; AdamW divides each gradient by its own running size, so where a
gradient is near zero a rounding difference moves a weight by up to the learning rate.

    .venv/bin/python benchmarks/composed.py [--dp 2 --tp 2 --pp 2] [--steps 5] [--adamw]
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from pathlib import Path

import torch
from torch import nn

from helpers import start_cluster

WIDTH, HEADS, LAYERS, SEQ = 32, 4, 4, 32  # LAYERS: a multiple of 2 * pp
MICRO, MICROBATCHES = 4, 4  # sequences per micro-batch, micro-batches per dp rank and step


def corpus() -> tuple[torch.Tensor, int]:
    """scikit-learn's data set descriptions as character ids, and the number of characters."""
    import sklearn

    folder = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "descr")
    text = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(folder, "*.rst"))))
    chars = sorted(set(text))
    return torch.tensor([chars.index(c) for c in text]), len(chars)


class Block(nn.Module):
    """Pre-norm attention and MLP; head count taken from the (maybe tensor-parallel) width."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (m(h).view(b, t, -1, WIDTH // HEADS).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """Embeddings, blocks by name (a pipeline stage keeps its own), final norm and head."""

    def __init__(self, vocab: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, vocab)

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for layer in self.layers.values():
            x = layer(x)
        return self.head(self.ln(x)) if self.head is not None else x


def loss_fn(logits, y):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def batch(data: torch.Tensor, step: int, dp: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's whole batch (every dp rank's share), the same in every process."""
    g = torch.Generator().manual_seed(step)
    starts = torch.randint(0, len(data) - SEQ - 1, (dp * MICRO * MICROBATCHES,), generator=g)
    return (torch.stack([data[s:s + SEQ] for s in starts]),
            torch.stack([data[s + 1:s + SEQ + 1] for s in starts]))


def optimizer(params, adamw: bool):
    return torch.optim.AdamW(params, lr=1e-2) if adamw else torch.optim.SGD(params, lr=0.5)


def one_process(dp: int, steps: int, adamw: bool):
    data, vocab = corpus()
    torch.manual_seed(0)
    model = GPT(vocab)
    opt = optimizer(model.parameters(), adamw)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        x, y = batch(data, step, dp)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = (time.perf_counter() - start) / steps
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, seconds


def composed(shape: tuple[int, int, int], steps: int, adamw: bool):
    """On every rank: (its stages, its losses, the full weights of its stages, s per step)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    pp, dp, tp = shape
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("pp", "dp", "tp"))
    data, vocab = corpus()
    pp_rank, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    n_stages = 2 * pp
    per_stage = LAYERS // n_stages
    chunks = []
    for s in (pp_rank, pp_rank + pp):  # interleaved: stages r and r + pp on pipeline rank r
        torch.manual_seed(0)  # the whole model, as one process makes it; keep this stage's part
        m = GPT(vocab)
        for i in range(LAYERS):
            if not s * per_stage <= i < (s + 1) * per_stage:
                del m.layers[str(i)]
        if s != 0:
            m.tok = m.pos = None
        if s != n_stages - 1:
            m.ln = m.head = None
        plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                "o": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
        for block in m.layers.values():
            parallelize_module(block, mesh["tp"], plan)
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(m, mesh=mesh["dp"])
        chunks.append((s, m))
    stages = [PipelineStage(m, s, n_stages, torch.device("cpu"), group=mesh["pp"].get_group())
              for s, m in chunks]
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    opt = optimizer([p for _, m in chunks for p in m.parameters()], adamw)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        x, y = (t.chunk(dp)[dp_rank] for t in batch(data, step, dp))
        opt.zero_grad()
        got: list[torch.Tensor] = []
        if pp_rank == 0:
            schedule.step(x, target=y, losses=got)
        else:
            schedule.step(target=y, losses=got)
        opt.step()
        # the pipeline ranks with the last stage hold the micro-batches' losses: the mean over
        # them, summed over all ranks, counts each (dp, tp) pair once
        mine = torch.stack(got).mean() if got else torch.zeros(())
        dist.all_reduce(mine)
        losses.append((mine / (dp * tp)).item())
    seconds = (time.perf_counter() - start) / steps
    weights = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
               for _, m in chunks for k, v in m.state_dict().items()}
    return [s for s, _ in chunks], losses, weights, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--adamw", action="store_true", help="AdamW instead of SGD")
    args = parser.parse_args()
    shape = (args.pp, args.dp, args.tp)
    losses, weights, seconds = one_process(args.dp, args.steps, args.adamw)
    print(f"one process: {seconds:.2f} s per step; losses "
          + ", ".join(f"{v:.4f}" for v in losses))
    with start_cluster(n=args.pp * args.dp * args.tp, backend="gloo", activate=False) as cluster:
        # the definitions above, made on the engines (functions sent to them look their
        # globals up there)
        cluster.view.execute(Path(__file__).read_text().split("\ndef main(")[0], block=True)
        results = cluster.view.apply_sync(composed, shape, args.steps, args.adamw)
    print(f"mesh (pp, dp, tp) = {shape}, {'AdamW' if args.adamw else 'SGD'}, {args.steps} steps:")
    for rank, (stages, got, mine, seconds) in enumerate(results):
        loss = max(abs(a - b) for a, b in zip(got, losses))
        weight = max((v - weights[k]).abs().max().item() for k, v in mine.items())
        print(f"  rank {rank}: stages {stages}, loss differs by {loss:.1e}, weights by "
              f"{weight:.1e}, {seconds:.2f} s per step")


if __name__ == "__main__":
    main()
