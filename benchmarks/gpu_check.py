"""The course on a machine with one NVIDIA GPU: one report of what runs there (`make gpu-check`).

Uses the machine's own PyTorch and installs nothing: on a machine without the course's other
packages, install the wheels that `benchmarks/gpu_wheels.sh` saved beside the repository first
(the README's GPU section says how). Writes one Markdown report (--out), in three parts:

1. `make check`'s table (helpers.machine.preflight), as an instructor would read it that morning;
2. the GPU-only paths that one GPU can run, each on a cluster of one NCCL rank on GPU 0
   (NCCL refuses two ranks on one GPU): the collectives on CUDA tensors, CUDA-event timing
   (helpers.timing) against the host clock, the allocator's peak memory, DDP with device_ids,
   FSDP2, DTensor's tensor parallelism, torch.distributed.pipelining and DCP on CUDA, each
   checked against the same work done without torch.distributed;
3. the lesson notebooks on CPU ranks (gloo) with CUDA present, as benchmarks/world_sizes.py
   runs them (4 ranks unless --ranks).

Each check prints pass or FAIL with its error, and the report keeps going. Exit status 1 if
any check failed. About 5 minutes on a 16-core GPU machine (part 3 is most of it).
Run: python3 benchmarks/gpu_check.py [--out gpu-check.md] [--ranks 4] [--no-notebooks]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("IPP_NONINTERACTIVE", "1")

# Each check runs on the one rank (a %%px cell); it ends by setting `found`, a line for the report.
CHECKS: dict[str, str] = {
    "rank on GPU 0, NCCL": """
        assert backend == "nccl" and dist.get_backend() == "cpu:gloo,cuda:nccl", (backend, dist.get_backend())
        assert device.type == "cuda" and torch.cuda.current_device() == device.index, device
        found = f"{device}, {torch.cuda.get_device_name(device)}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    """,
    "collectives on CUDA tensors (world size 1)": """
        t = torch.arange(6.0, device=device)
        dist.all_reduce(t); dist.broadcast(t, src=0)
        out = torch.empty(6, device=device)
        dist.all_gather_into_tensor(out, t)
        shard = torch.empty(6, device=device)
        dist.reduce_scatter_tensor(shard, out)
        work = dist.all_reduce(t, async_op=True)
        work.wait()   # on NCCL: the stream waits, not the CPU
        torch.cuda.synchronize(device)
        assert torch.equal(shard, torch.arange(6.0, device=device)), shard
        found = "all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor, async all_reduce: right values"
    """,
    "CUDA-event timing (helpers.timing)": """
        from helpers.timing import mark, seconds_between, sync, time_on_all_ranks
        a = torch.randn(4096, 4096, device=device)
        a @ a   # the first product also sets up cuBLAS: not timed
        start = mark(device)
        b = a @ a
        end = mark(device)
        sync(device)
        assert isinstance(start, torch.cuda.Event), type(start)
        gpu_s = seconds_between(start, end)
        slow = time_on_all_ranks(lambda: a @ a, device, repeats=5)
        assert 0 < gpu_s and 0 < slow, (gpu_s, slow)
        found = (f"one 4096^3 fp32 product: {gpu_s * 1e3:.2f} ms by CUDA events; "
                 f"time_on_all_ranks: {slow * 1e3:.2f} ms ({2 * 4096**3 / slow / 1e12:.1f} TFLOP/s)")
    """,
    "peak memory from the allocator (notebook 08)": """
        from torch import nn
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        m = nn.Linear(1024, 1024).to(device)
        opt = torch.optim.Adam(m.parameters())
        m(torch.randn(64, 1024, device=device)).sum().backward()
        opt.step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        tensors = 4 * 4 * sum(p.numel() for p in m.parameters())   # parameters, gradients, 2 moments
        assert peak >= tensors, (peak, tensors)
        found = f"peak {peak} B for a Linear(1024, 1024) Adam step; its parameters, gradients and moments {tensors} B"
    """,
    "DDP with device_ids (notebook 04)": """
        import copy
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
        ddp = DDP(copy.deepcopy(plain), device_ids=[device])
        x = torch.randn(8, 16, device=device)
        for m in (plain, ddp):
            m(x).square().sum().backward()
        for p, q in zip(plain.parameters(), ddp.module.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        found = "gradients equal the module's without DDP"
    """,
    "FSDP2 on a CUDA mesh (notebook 08)": """
        import copy
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
        sharded = copy.deepcopy(plain)
        mesh = init_device_mesh("cuda", (world_size,))
        for layer in (sharded[0], sharded[2], sharded):
            fully_shard(layer, mesh=mesh)
        opts = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (plain, sharded)]
        x = torch.randn(8, 16, device=device)
        for _ in range(3):
            for m, o in zip((plain, sharded), opts):
                o.zero_grad(); m(x).square().sum().backward(); o.step()
        for p, q in zip(plain.parameters(), sharded.parameters()):
            torch.testing.assert_close(p, q.full_tensor())
        found = "3 Adam steps equal the unsharded module's"
    """,
    "DTensor tensor parallelism on CUDA (notebook 09)": """
        import copy
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 12)).to(device)
        tp = parallelize_module(copy.deepcopy(plain), init_device_mesh("cuda", (world_size,)),
                                {"0": ColwiseParallel(), "2": RowwiseParallel()})
        x = torch.randn(8, 12, device=device)
        torch.testing.assert_close(tp(x), plain(x))
        found = "parallelize_module's output equals the plain block's"
    """,
    "torch.distributed.pipelining on CUDA (notebook 09)": """
        import copy
        import torch.nn.functional as F
        from torch import nn
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 12)).to(device)
        stage = copy.deepcopy(plain)
        x, y = torch.randn(16, 12, device=device), torch.randn(16, 12, device=device)
        schedule = ScheduleGPipe(PipelineStage(stage, 0, 1, device), n_microbatches=4, loss_fn=F.mse_loss)
        schedule.step(x, target=y, losses=[])
        F.mse_loss(plain(x), y).backward()
        for p, q in zip(plain.parameters(), stage.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        found = "one stage, 4 micro-batches: gradients equal the plain module's"
    """,
    "context_parallel on CUDA (notebook 10)": """
        import torch.nn.functional as F
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        torch.manual_seed(0)
        q, k, v = (torch.randn(2, 3, 64 * world_size, 16, device=device) for _ in range(3))
        whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with context_parallel(init_device_mesh("cuda", (world_size,)), buffers=[q, k, v],
                              buffer_seq_dims=[2, 2, 2]):
            mine = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(mine, whole)  # one rank: its shard is the whole, in order
        found = "PyTorch's context-parallel attention equals scaled_dot_product_attention"
    """,
    "all_to_all_single with counts on CUDA (notebook 10)": """
        counts = torch.tensor([3], device=device)
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts)
        rows = torch.randn(int(received.sum()), 12, device=device)
        out = torch.empty(counts.tolist()[0], 12, device=device)
        dist.all_to_all_single(out, rows, counts.tolist(), received.tolist())
        assert torch.equal(out, rows)
        found = "counts first, then 3 rows, split sizes read with .tolist()"
    """,
    "DCP save and load from CUDA (notebooks 05 and 08)": """
        import tempfile
        import torch.distributed.checkpoint as dcp
        state = {"w": torch.randn(100, device=device)}
        folder = tempfile.mkdtemp(prefix="gpu-check-dcp-")
        dcp.save(state, checkpoint_id=folder)
        back = {"w": torch.zeros(100, device=device)}
        dcp.load(back, checkpoint_id=folder)
        assert back["w"].device == device and torch.equal(back["w"], state["w"])
        found = f"saved and loaded on {device}"
    """,
    "notebook 11's composed GPT on a (1, 1, 1) mesh, blocks compiled": """
        # notebook 11's own code (its %%writefile cell), on a mesh of one rank: two pipeline stages
        # on it (interleaved 1F1B, v = 2), tensor parallelism and FSDP2 of size 1; eager and with
        # each block compiled (torch.compile after parallelize_module, before fully_shard), against
        # the same model trained without torch.distributed
        import json, time
        from helpers.gpt import GPT
        from helpers.timing import mark, seconds_between, sync
        cells = json.load(open(f"{course_root}/notebooks/11_putting_it_together.ipynb"))["cells"]
        code = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("%%writefile {workdir}/composed11.py"))
        exec("".join(code.splitlines(True)[1:]), globals())
        import inspect
        if "output_grads" not in inspect.signature(PipelineStage.__init__).parameters:
            # a PyTorch older than the course's range (2.13): its stages infer the shapes the
            # notebook states, so build() runs there without them
            stage_class = PipelineStage
            def PipelineStage(*args, output_grads=None, input_grads=None, **kwargs):
                return stage_class(*args, **kwargs)
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(device.type, (1, 1, 1), mesh_dim_names=AXES)
        ROWS, STEPS = 32, 4
        torch.manual_seed(0)
        plain = GPT(cfg).to(device)
        opt = torch.optim.SGD(plain.parameters(), lr=LR, momentum=MOMENTUM)
        ref = []
        for step in range(STEPS):
            x, y = (t.to(device) for t in batch(data, step, ROWS, cfg.seq))
            opt.zero_grad(); loss = loss_fn(plain(x), y); loss.backward(); opt.step(); ref.append(loss.item())
        times, gaps = {}, {}
        for compiled in (False, True):
            parts, schedule, opts = build(mesh, ROWS, compile_blocks=compiled)
            sync(device); start = time.perf_counter()
            if compiled:
                compile_first(parts, ROWS // M)   # as the notebook's compile cell does
            got = [train_step(mesh, schedule, opts, 0, ROWS)]
            sync(device); first = time.perf_counter() - start
            begin = mark(device)
            got += [train_step(mesh, schedule, opts, step, ROWS) for step in range(1, STEPS)]
            end = mark(device); sync(device)
            times[compiled] = (first, seconds_between(begin, end) / (STEPS - 1))
            gaps[compiled] = max(abs(a - b) for a, b in zip(got, ref))
            assert gaps[compiled] < 1e-3, (compiled, got, ref)
        found = (f"{STEPS} steps, loss within {max(gaps.values()):.1e} of the plain model's (eager "
                 f"{gaps[False]:.1e}, compiled {gaps[True]:.1e}); first step eager {times[False][0]:.1f} s, "
                 f"compiling and first step {times[True][0]:.1f} s; then {times[False][1] * 1e3:.1f} ms "
                 f"per step eager, {times[True][1] * 1e3:.1f} ms compiled")
    """,
}


def section(title: str, body: str) -> str:
    return f"## {title}\n\n{body.rstrip()}\n"


def preflight_table() -> tuple[str, bool]:
    """`make check`'s table (its exit status is 1 on a blocker)."""
    run = subprocess.run([sys.executable, "-m", "helpers.machine.preflight"], cwd=ROOT, text=True,
                         capture_output=True, timeout=300)
    return f"```\n{(run.stdout + run.stderr).strip()}\n```\nexit status {run.returncode}", True


def gpu_checks() -> tuple[str, bool]:
    """Every check of CHECKS on a cluster of one NCCL rank."""
    import torch

    if not torch.cuda.is_available():
        return "skipped: torch sees no CUDA device on this machine", True
    from helpers import start_cluster

    rows, ok = [], True
    cluster = start_cluster(n=1, backend="nccl", activate=False, cell_timeout=120)
    try:
        cluster.view.push({"course_root": str(ROOT)}, block=True)
        for name, code in CHECKS.items():
            start = time.perf_counter()
            try:
                cluster.px(textwrap.dedent(code))
                found = cluster.view.pull("found", targets=cluster.ranks[0].engine_id)
                verdict = "pass"
            except Exception as err:  # noqa: BLE001 - every failure goes into the report
                found, verdict, ok = str(err).strip().splitlines()[-1][:400], "FAIL", False
            rows.append(f"| {name} | {verdict} | {found} | {time.perf_counter() - start:.1f} s |")
    finally:
        cluster.stop()
    head = "| check | verdict | found | time |\n|---|---|---|---|\n"
    return head + "\n".join(rows), ok


def notebooks(ranks: int) -> tuple[str, bool]:
    """The lessons on CPU ranks with CUDA present, as benchmarks/world_sizes.py runs them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from world_sizes import run

    os.environ["COURSE_BACKEND"] = "gloo"
    rows, ok = [], True
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        r = run(path, ranks, timeout=600)
        ok &= r.ok
        rows.append(f"| {path.name} | {'pass' if r.ok else 'FAIL: ' + r.error} | "
                    f"{len(r.skipped)} | {r.seconds:.0f} s |")
    os.environ.pop("COURSE_BACKEND")
    head = f"{ranks} CPU ranks, gloo\n\n| notebook | verdict | steps skipped | time |\n|---|---|---|---|\n"
    return head + "\n".join(rows), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-check.md")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--no-notebooks", action="store_true")
    args = parser.parse_args(argv)

    import torch

    began = time.perf_counter()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none visible"
    parts = [f"# GPU check\n\nPython {platform.python_version()}, torch {torch.__version__} "
             f"(CUDA {torch.version.cuda}), GPU: {gpu}, {os.cpu_count()} cores\n"]
    ok = True
    steps = [("make check", preflight_table), ("GPU paths, one NCCL rank", gpu_checks)]
    if not args.no_notebooks:
        steps.append(("lesson notebooks on CPU ranks, CUDA present",
                      lambda: notebooks(args.ranks)))
    for title, step in steps:
        print(f"gpu check: {title} ...", flush=True)
        try:
            body, passed = step()
        except Exception:  # noqa: BLE001 - the report says what broke and goes on
            body, passed = f"```\n{traceback.format_exc()[-3000:]}\n```", False
        ok &= passed
        parts.append(section(title, body))
        args.out.write_text("\n".join(parts))  # written after each part: a cut run keeps what it did
        print(body, flush=True)
    parts.append(f"\n{'all passed' if ok else 'SOME FAILED'}, {time.perf_counter() - began:.0f} s\n")
    args.out.write_text("\n".join(parts))
    print(parts[-1])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
