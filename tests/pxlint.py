"""Read every %%px cell of the notebooks as it would run on a GPU node under nccl, and flag
two kinds of bug that pass on CPU ranks and fail there:

- a tensor made without a device (so on the CPU) that meets a collective or a point-to-point
  call on the default group: the lessons' tensors live on ``device`` (code that means the
  CPU says ``device="cpu"``, or names a group of its own);
- an ``isend`` and an ``irecv`` posted one by one on the same rank: under NCCL the two
  transfers between a pair of ranks queue one behind the other and can deadlock; post them
  together with ``batch_isend_irecv`` (calls in exclusive branches, such as ``if rank == 0``
  and ``elif rank == 1``, run on different ranks and are fine).

and three kinds of timing that hold on the CPU and not under NCCL, where a collective's call,
and its ``wait()``, return to Python before the GPU has done the work:

- ``is_completed()`` asserted after ``wait()``: under NCCL ``wait()`` makes the current CUDA
  stream wait and returns at once, so the work may still be running;
- a clock read in a callback of a ``Work``'s future (``get_future().then(...)``): under NCCL
  that callback does not mark the end of the GPU work;
- a clock read after a communication call with no synchronise in between (``sync(device)``,
  ``torch.cuda.synchronize()``, or a value read back with ``.item()``/``.tolist()``/``.cpu()``).

Used by tests/test_pxlint.py; run it alone with ``python tests/pxlint.py notebooks``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

FACTORIES = {"tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint",
             "linspace", "eye", "as_tensor"}
COMMUNICATION = {
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_single",
    "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_single",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
}


@dataclass(frozen=True)
class Finding:
    notebook: str
    cell: int
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.notebook} cell {self.cell}, line {self.line}: {self.message}"


def _source(cell_source: str) -> str | None:
    """The Python of a %%px cell (its other IPython magics blanked), or None for other cells."""
    lines = cell_source.splitlines()
    if not lines or not lines[0].startswith("%%px"):
        return None
    return "\n".join("pass" if ln.lstrip().startswith("%") else ln for ln in lines[1:])


def _is_dist_call(node: ast.AST, names: set[str]) -> str | None:
    """The name of the torch.distributed function this call calls, if it is one of names."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "dist"
            and node.func.attr in names):
        return node.func.attr
    return None


def _undeviced_factory(node: ast.AST) -> bool:
    """A torch.<factory>(...) call without device=, or a list of them."""
    if isinstance(node, ast.ListComp | ast.List):
        elements = [node.elt] if isinstance(node, ast.ListComp) else node.elts
        return any(_undeviced_factory(e) for e in elements)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and node.func.attr in FACTORIES
            and not any(k.arg == "device" for k in node.keywords))


def _assignments(tree: ast.AST) -> dict[str, list[tuple[int, bool]]]:
    """name -> [(line, made without a device)] for every simple assignment, in line order."""
    found: dict[str, list[tuple[int, bool]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = []
            for target in node.targets:
                if isinstance(target, ast.Name):
                    pairs.append((target.id, node.value))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += [(t.id, v) for t, v in zip(target.elts, node.value.elts)
                              if isinstance(t, ast.Name)]
            for name, value in pairs:
                found.setdefault(name, []).append((node.lineno, _undeviced_factory(value)))
    return {name: sorted(lines) for name, lines in found.items()}


def _undeviced_at(name: str, line: int, assigned: dict[str, list[tuple[int, bool]]]) -> bool:
    """Whether the last assignment of name before line made a tensor without a device."""
    before = [undeviced for at, undeviced in assigned.get(name, []) if at <= line]
    return bool(before) and before[-1]


def _tensor_arguments(call: ast.Call) -> list[ast.AST]:
    """The arguments of a communication call that may be tensors (not group=, op=, ...)."""
    return list(call.args) + [k.value for k in call.keywords
                              if k.arg not in ("group", "op", "src", "dst", "tag", "async_op")]


def _device_problems(tree: ast.AST) -> list[tuple[int, str]]:
    assigned = _assignments(tree)
    problems = []
    for node in ast.walk(tree):
        op = _is_dist_call(node, COMMUNICATION | {"P2POp"})
        if op is None or any(k.arg == "group" for k in node.keywords):
            continue  # a call on a group of its own is deliberate
        for arg in _tensor_arguments(node):
            names = [n.id for n in ast.walk(arg) if isinstance(n, ast.Name)]
            if _undeviced_factory(arg) or any(_undeviced_at(n, node.lineno, assigned)
                                              for n in names):
                problems.append((node.lineno, f"dist.{op} gets a tensor made without a device "
                                 "(on the CPU): make it on `device`, or say device=\"cpu\""))
                break
    return problems


def _branches(tree: ast.AST) -> dict[ast.AST, list[tuple[ast.If, str]]]:
    """For every node, the if-statements it sits in and in which branch ('body' or 'else')."""
    paths: dict[ast.AST, list[tuple[ast.If, str]]] = {}

    def visit(node: ast.AST, path: list[tuple[ast.If, str]]) -> None:
        paths[node] = path
        if isinstance(node, ast.If):
            visit(node.test, path)
            for child in node.body:
                visit(child, [*path, (node, "body")])
            for child in node.orelse:
                visit(child, [*path, (node, "else")])
            return
        for child in ast.iter_child_nodes(node):
            visit(child, path)

    visit(tree, [])
    return paths


def _exclusive(a: list[tuple[ast.If, str]], b: list[tuple[ast.If, str]]) -> bool:
    """True if two nodes sit in different branches of the same if-statement."""
    branch_of = dict(a)
    return any(node in branch_of and branch_of[node] != branch for node, branch in b)


def _p2p_problems(tree: ast.AST) -> list[tuple[int, str]]:
    paths = _branches(tree)
    sends, recvs = [], []
    for node in ast.walk(tree):
        op = _is_dist_call(node, {"isend", "irecv"})
        if op == "isend":
            sends.append(node)
        elif op == "irecv":
            recvs.append(node)
    problems = []
    for send in sends:
        for recv in recvs:
            if not _exclusive(paths[send], paths[recv]):
                line = min(send.lineno, recv.lineno)
                problems.append((line, "an isend and an irecv posted one by one on the same "
                                       "rank can deadlock under NCCL: post them together "
                                       "with dist.batch_isend_irecv"))
    return sorted(set(problems))


CLOCKS = {"perf_counter", "perf_counter_ns", "time", "monotonic", "monotonic_ns"}
SYNCS = {"synchronize", "sync", "item", "tolist", "cpu", "elapsed_time"}


def _called(node: ast.AST) -> str | None:
    """The name a call calls: f(...) -> 'f', x.y.f(...) -> 'f'."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _clock_reads(tree: ast.AST) -> list[int]:
    """Lines that read the host clock: time.perf_counter(), time.time(), ..."""
    return sorted(n.lineno for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and isinstance(n.func.value, ast.Name) and n.func.value.id == "time"
                  and n.func.attr in CLOCKS)


def _timing_problems(tree: ast.AST) -> list[tuple[int, str]]:
    clocks = _clock_reads(tree)
    syncs = sorted(n.lineno for n in ast.walk(tree) if _called(n) in SYNCS)
    waits = sorted(n.lineno for n in ast.walk(tree) if _called(n) == "wait")
    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and any(_called(n) == "is_completed"
                                                for n in ast.walk(node.test)):
            if any(w <= node.lineno and not any(w <= s <= node.lineno for s in syncs)
                   for w in waits):
                problems.append((node.lineno, "is_completed() asserted after wait(): under "
                                 "NCCL wait() does not block the CPU, so the work may still "
                                 "be running (synchronize first, or assert nothing of it)"))
        if _called(node) == "then" and node.args:
            callback = node.args[0]
            body = functions.get(callback.id) if isinstance(callback, ast.Name) else callback
            if body is not None and _clock_reads(body):
                problems.append((node.lineno, "a clock read in a Work future's callback: "
                                 "under NCCL the future completes when the work is queued, "
                                 "not done; time GPU work with CUDA events"))
        op = _is_dist_call(node, COMMUNICATION)
        if op is None or any(k.arg == "group" for k in node.keywords):
            continue
        before = [c for c in clocks if c < node.lineno]
        after = [c for c in clocks if c > node.lineno]
        if before and after and not any(node.lineno <= s <= after[0] for s in syncs):
            problems.append((after[0], f"the clock is read after dist.{op} with no "
                             "synchronise in between: under NCCL the call returns before the "
                             "GPU has done the work (call sync(device) first)"))
    return problems


def lint_source(code: str) -> list[tuple[int, str]]:
    """(line, message) for every problem in the Python of one %%px cell."""
    tree = ast.parse(code)
    return sorted(set(_device_problems(tree) + _p2p_problems(tree) + _timing_problems(tree)))


def lint_notebook(path: Path) -> list[Finding]:
    findings = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        code = _source(cell.source) if cell.cell_type == "code" else None
        if code is not None:
            findings += [Finding(path.name, index, line + 1, message)  # +1: the %%px line
                         for line, message in lint_source(code)]
    return findings


def main(folders: list[str]) -> int:
    findings = [f for folder in folders for p in sorted(Path(folder).rglob("*.ipynb"))
                if ".ipynb_checkpoints" not in p.parts for f in lint_notebook(p)]
    for finding in findings:
        print(finding)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["notebooks"]))
