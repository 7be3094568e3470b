"""Notebook 11's composed run, at any mesh shape, against one process.

Runs notebook 11's own code (its `%%writefile composed11.py` cell: `build`, `train_step`,
`full_weights`; a small character-level GPT with tensor parallelism inside each block, FSDP2
along dp and an interleaved 1F1B pipeline along pp, on one mesh (pp, dp, tp)) on the course's
cluster, and the same model in this process, from the same initial weights, on the same
batches, with the same SGD. Prints each rank's largest difference in loss and in weights after
the steps, and the seconds per step. With --compile, each block is compiled as the notebook's
step 7 does on GPU ranks (torch.compile after parallelize_module, before fully_shard; each
stage run once on its own first, `compile_first`), and the seconds spent compiling are printed
apart from the steps. Asserts nothing.

    .venv/bin/python benchmarks/composed.py [--pp 2 --dp 2 --tp 2] [--steps 5] [--compile]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from helpers import start_cluster

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "11_putting_it_together.ipynb"


def notebook_code() -> str:
    """The notebook's composed11.py, as its %%writefile cell writes it."""
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        source = "".join(cell["source"])
        if source.startswith("%%writefile {workdir}/composed11.py"):
            return source.split("\n", 1)[1]
    raise SystemExit(f"{NOTEBOOK.name} has no %%writefile cell for composed11.py")


ON_RANKS = """
import time
from torch.distributed.device_mesh import init_device_mesh
from helpers.timing import sync
mesh = init_device_mesh(device.type, SHAPE, mesh_dim_names=AXES)
parts, schedule, opts = build(mesh, ROWS, compile_blocks=COMPILE)
compiling = 0.0
if COMPILE:  # each stage once on its own, on every rank at once (the notebook's step 7)
    start = time.perf_counter()
    compile_first(parts, ROWS // (mesh["dp"].size() * M))
    compiling = time.perf_counter() - start
sync(device)
start = time.perf_counter()
losses = [train_step(mesh, schedule, opts, step, ROWS) for step in range(STEPS)]
sync(device)
seconds = (time.perf_counter() - start) / STEPS
weights = full_weights(parts)
stages = [s for s in range(mesh["pp"].get_local_rank(), 2 * mesh["pp"].size(), mesh["pp"].size())]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--dp", type=int, default=2)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    args = parser.parse_args()
    shape, world = (args.pp, args.dp, args.tp), args.pp * args.dp * args.tp
    rows = 8 * world  # windows per step, as the notebook takes them
    code = notebook_code()

    here: dict = {"device": torch.device("cpu")}
    exec(code, here)  # the notebook's definitions, for the one process
    torch.manual_seed(0)
    model = here["GPT"](here["cfg"])
    opt = torch.optim.SGD(model.parameters(), lr=here["LR"], momentum=here["MOMENTUM"])
    ref_losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        x, y = here["batch"](here["data"], step, rows, here["cfg"].seq)
        loss = here["loss_fn"](model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    ref_seconds = (time.perf_counter() - start) / args.steps
    ref_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    print(f"one process: {ref_seconds:.3f} s per step; losses "
          + ", ".join(f"{v:.4f}" for v in ref_losses))

    with start_cluster(n=world, backend="gloo", activate=False, timeout=600,
                       cell_timeout=1800) as cluster:
        cluster.view.push({"SHAPE": shape, "ROWS": rows, "STEPS": args.steps,
                           "COMPILE": args.compile}, block=True)
        cluster.px(code)
        cluster.px(ON_RANKS)
        results = cluster.view.pull(["stages", "losses", "weights", "seconds", "compiling"],
                                    block=True)
    print(f"mesh (pp, dp, tp) = {shape}, SGD, {args.steps} steps"
          + (", blocks compiled" if args.compile else "") + ":")
    for rank, (stages, losses, weights, seconds, compiling) in enumerate(results):
        loss = max(abs(a - b) for a, b in zip(losses, ref_losses))
        weight = max((v - ref_weights[k.replace("_orig_mod.", "")]).abs().max().item()
                     for k, v in weights.items())  # a compiled block's weights are its module's
        print(f"  rank {rank}: stages {stages}, loss differs by {loss:.1e}, weights by "
              f"{weight:.1e}, {seconds:.2f} s per step"
              + (f", {compiling:.1f} s compiling its blocks" if args.compile else ""))


if __name__ == "__main__":
    main()
