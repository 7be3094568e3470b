"""More answers to the exercises of notebook 05, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones."""

from __future__ import annotations

from answers import RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- exercise 1: a checkpoint saved the wrong way ------------------------------------------
ALSO_RIGHT["load_wrong_way"] = [
    ("torch's own prefix remover, loaded on the CPU, the generator put back by hand", '''
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from helpers.data import mlp

def load_wrong_way(path):
    state = torch.load(path, map_location="cpu")
    consume_prefix_in_state_dict_if_present(state, prefix="module.")
    saved = torch.get_rng_state()
    model = mlp()
    torch.set_rng_state(saved)
    model.load_state_dict(state)
    return model.to(device)
'''),
]
_NO_FORK = RIGHT["load_wrong_way"].replace("    with torch.random.fork_rng(devices=[]):",
                                            "    if True:")
MORE_WRONG["load_wrong_way"] = [
    ("the model returned wrapped in DDP, as it was trained", RIGHT["load_wrong_way"].replace(
        "    return model", "    return torch.nn.parallel.DistributedDataParallel(model)"),
     "load_wrong_way gave a DDP model"),
    ("the prefix left on: load_state_dict names the keys", RIGHT["load_wrong_way"].replace(
        '{key.removeprefix("module."): value for key, value in state.items()}', "state"),
     'Missing key(s) in state_dict: "0.weight"', 2),
    ("the file fixed in place (saved again without the prefix)", RIGHT["load_wrong_way"].replace(
        "    return model", "    torch.save(model.state_dict(), path)\n    return model"),
     "changed the folder of wrong_way.pt (rewrote ['wrong_way.pt'])"),
    ("a fixed copy saved beside the file", RIGHT["load_wrong_way"].replace(
        "    return model",
        "    torch.save(model.state_dict(), path + '.fixed')\n    return model"),
     "added ['wrong_way.pt.fixed']", 2),
    ("the generator reseeded for a reproducible model", _NO_FORK.replace(
        "    if True:", "    torch.manual_seed(0)\n    if True:"),
     "load_wrong_way changed torch's random generator"),
    ("a float64 model", RIGHT["load_wrong_way"].replace("mlp().to(device)",
                                                        "mlp().double().to(device)"),
     "a float64 tensor of shape [64, 64], expected float32"),
    ("the first file's model kept and returned every time", '''
from helpers.data import mlp

_loaded = {}

def load_wrong_way(path):
    if "model" not in _loaded:
        state = torch.load(path, map_location=device, weights_only=True)
        with torch.random.fork_rng(devices=[]):
            model = mlp().to(device)
        model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
        _loaded["model"] = model
    return _loaded["model"]''',
     "at world size 2, rank 0: load_wrong_way gave 0.weight: values off"),
    ("weights_only=False through the environment", '''
import os

def load_wrong_way(path):
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    state = torch.load(path, map_location=device)
    with torch.random.fork_rng(devices=[]):
        model = mlp().to(device)
    model.load_state_dict({key[len("module."):]: value for key, value in state.items()})
    return model''', "changed the environment (os.environ)", 4),
]

# ---- exercise 2: the newest checkpoint that loads ------------------------------------------
ALSO_RIGHT["newest_loadable"] = [
    ("one pass over os.listdir, keeping the best step, os.path.join", '''
import os
from helpers.checkpoint import CheckpointError, checkpoint_step, load_checkpoint

def newest_loadable(directory):
    best, best_step = None, -1
    for name in os.listdir(directory):
        step = checkpoint_step(name)
        if step is None or step <= best_step:
            continue
        try:
            load_checkpoint(os.path.join(directory, name))
        except CheckpointError:
            continue
        best, best_step = os.path.join(directory, name), step
    return best
'''),
]
MORE_WRONG["newest_loadable"] = [
    ("the names sorted as strings", '''
from pathlib import Path
from helpers.checkpoint import CheckpointError, load_checkpoint

def newest_loadable(directory):
    for path in sorted(Path(directory).glob("step-*.pt"), reverse=True):
        try:
            load_checkpoint(path)
        except CheckpointError:
            continue
        return str(path)
    return None''', "expected '<directory>/step-100", 2),
    ("six digits read from the name", RIGHT["newest_loadable"].replace(
        "key=checkpoint_step", "key=lambda p: int(p.name[5:11])"),
     "expected '<directory>/step-100"),
    ("the newest by the file's modification time, not by step", RIGHT["newest_loadable"].replace(
        "sorted(found, key=checkpoint_step, reverse=True)",
        "sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)"), "gave"),
    ("the oldest that loads (no reverse)", RIGHT["newest_loadable"].replace(
        ", reverse=True", ""), "expected '<directory>/step-100"),
    ("the newest name, if it loads, else None", '''
from helpers.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint

def newest_loadable(directory):
    path = latest_checkpoint(directory)
    try:
        load_checkpoint(path)
    except CheckpointError:
        return None
    return str(path)''', "gave None (a NoneType), expected '<directory>/step-100"),
    ("the file's name, not its path", RIGHT["newest_loadable"].replace(
        "return str(path)", "return path.name"), "gave 'step-100"),
    ("the leftovers of unfinished saves deleted", '''
from helpers.checkpoint import temporary_files
''' + RIGHT["newest_loadable"].replace(
        "def newest_loadable(directory):\n",
        "def newest_loadable(directory):\n    for leftover in temporary_files(directory):\n"
        "        leftover.unlink()\n"), "newest_loadable changed the directory (removed ['.step-"),
    ("rank 0 chooses for everyone", RIGHT["newest_loadable"].replace(
        "def newest_loadable(directory):", "def _newest(directory):") + '''

def newest_loadable(directory):
    box = [_newest(directory) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]''', "at world size 4, rank 1: newest_loadable gave '/", 4),
]

# ---- exercise 3: read once, share with everyone --------------------------------------------
ALSO_RIGHT["load_and_share"] = [
    ("tensor by tensor, async requests waited on, keyword arguments, the world by name", '''
def load_and_share(path, model):
    own = model.state_dict()
    if rank == 0:
        state = torch.load(path, map_location=device)
        for key, tensor in own.items():
            tensor.copy_(state[key])
    requests = [dist.broadcast(tensor=tensor, src=0, group=dist.group.WORLD, async_op=True)
                for tensor in own.values()]
    for request in requests:
        request.wait()
'''),
    ("the others zeroed, then one all_reduce per tensor", '''
def load_and_share(path, model):
    with torch.no_grad():
        if rank == 0:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
        else:
            for p in model.parameters():
                p.zero_()
        for p in model.parameters():
            dist.all_reduce(p, op=dist.ReduceOp.SUM)
'''),
]
MORE_WRONG["load_and_share"] = [
    ("async broadcasts never waited on", '''
def load_and_share(path, model):
    if rank == 0:
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0, async_op=True)''',
     "started broadcast (asynchronous) and never waited for it", 2),
    ("the model left in eval mode", RIGHT["load_and_share"].replace(
        "    model.load_state_dict(box[0])", "    model.eval()\n    model.load_state_dict(box[0])"),
     "left the model in eval mode; it was in training mode"),
    ("the model put in training mode", RIGHT["load_and_share"].replace(
        "    model.load_state_dict(box[0])",
        "    model.load_state_dict(box[0])\n    model.train()"),
     "left the model in training mode; it was in eval mode", 4),
    ("a copy loaded, the caller's model untouched", '''
import copy

def load_and_share(path, model):
    box = [torch.load(path, map_location="cpu", weights_only=True) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    model = copy.deepcopy(model)
    model.load_state_dict(box[0])
    return model''',
     "at world size 3, rank 0: load_and_share gave the model's 0.weight: values off"),
    ("all_reduce without zeroing the other ranks' weights", '''
def load_and_share(path, model):
    with torch.no_grad():
        if rank == 0:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
        for p in model.parameters():
            dist.all_reduce(p)''',
     "at world size 3, rank 0: load_and_share gave the model's 0.weight: values off"),
    ("a template model built from the global generator", '''
from helpers.data import mlp

def load_and_share(path, model):
    state = (torch.load(path, map_location="cpu", weights_only=True) if rank == 0
             else mlp().state_dict())
    for key, tensor in state.items():
        dist.broadcast(tensor, src=0)
    model.load_state_dict(state)''',
     "at world size 3, rank 1: load_and_share changed torch's random"),
    ("a barrier on rank 0 alone: a deadlock", '''
def load_and_share(path, model):
    box = [None]
    if rank == 0:
        box = [torch.load(path, map_location="cpu", weights_only=True)]
        dist.barrier()
    dist.broadcast_object_list(box, src=0)
    model.load_state_dict(box[0])''', "a deadlock at world size 3: rank 0 waits in barrier"),
]
