"""Helpers of notebooks 00 and 01 that need no cluster: the barrier probe's device, a backend's
error in one line, and the rules of the exercises read from a rank's record of calls."""

from __future__ import annotations

import torch

from helpers.exercises.cluster import FORBIDDEN, names_read
from helpers.exercises.point_to_point import messages, posted_together, ring_neighbours
from helpers.machine import backends
from helpers.text import backend_message


def test_the_barrier_probe_runs_on_the_backend_of_its_device(monkeypatch):
    """The course's group has no device_id: a barrier names the GPU, or it runs on gloo."""
    seen = []
    monkeypatch.setattr(backends.dist, "barrier", lambda **kw: seen.append(kw["device_ids"]))
    assert backends._barrier(0, 2, torch.device("cuda", 1), None)
    assert backends._barrier(0, 2, torch.device("cpu"), None)
    assert seen == [[1], None]


def test_a_backend_message_is_one_short_line_without_the_source_location():
    error = RuntimeError("[/x/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                         "[127.0.0.1]:23692. This is typically caused by a remote worker "
                         "crashing.\nmore")
    line = backend_message(error)
    assert line.startswith("Connection closed by peer [127.0.0.1]:23692.") and len(line) <= 80
    assert line.endswith(" ...") and "\n" not in line
    assert backend_message("[a.cc:1] Timed out waiting 2000ms") == "Timed out waiting 2000ms"
    assert backend_message("no location here") == "no location here"


def _functions(source: str) -> dict:
    namespace: dict = {}
    exec(source, namespace)
    return namespace


def test_the_names_an_answer_reads_include_its_helpers_and_nested_code():
    ns = _functions("def how_many():\n    return world_size\n"
                    "def count_ranks():\n    return how_many()\n")
    assert "world_size" in names_read(ns["count_ranks"], ns)
    ns = _functions("def count_ranks():\n    f = lambda: dist.get_world_size()\n    return f()\n")
    assert "get_world_size" in names_read(ns["count_ranks"], ns)
    ns = _functions("def count_ranks():\n    world_size = 3  # a local of its own\n"
                    "    return world_size\n")
    assert not names_read(ns["count_ranks"], ns) & set(FORBIDDEN)
    ns = _functions("def count_ranks():\n    return count_ranks\n")  # recursion: no loop
    assert "count_ranks" in names_read(ns["count_ranks"], ns)
    assert names_read(None, {}) == set()


def _call(op: str, peer=None, parts=()) -> dict:
    return {"op": op, "kind": "p2p", "peer": peer, "parts": parts, "shapes": ()}


def test_messages_count_the_parts_of_a_batch():
    calls = [_call("send", 1), _call("recv", None),
             _call("batch_isend_irecv", parts=(("isend", 2, (3,)), ("irecv", 3, (3,))))]
    assert messages(calls) == ([1, 2], [None, 3])


def test_non_blocking_calls_only_inside_a_batch():
    batch = _call("batch_isend_irecv", parts=(("isend", 1, (3,)), ("irecv", 2, (3,))))
    assert posted_together([batch], 0, 3, None) is None
    assert posted_together([_call("send", 1), _call("recv", 2)], 0, 3, None) is None
    assert "one by one" in posted_together([_call("isend", 1), _call("irecv", 2)], 0, 3, None)


def test_a_ring_sends_right_and_receives_from_the_left_a_fixed_number_of_times():
    step = _call("batch_isend_irecv", parts=(("isend", 2, (3,)), ("irecv", 0, (3,))))
    assert ring_neighbours([step, step], 1, 3, count=2) is None
    assert "exactly 2 steps" in ring_neighbours([step], 1, 3, count=2)
    assert "right neighbour, rank 2" in ring_neighbours([_call("send", 0)], 1, 3)
    assert "any source" in ring_neighbours([_call("recv", None)], 1, 3)
    pair = _call("batch_isend_irecv", parts=(("isend", 1, (3,)), ("irecv", 1, (3,))))
    assert ring_neighbours([pair], 0, 2, count=1) is None  # 2 ranks: left and right are one
