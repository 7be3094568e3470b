"""The point-to-point probes of helpers.machine.backends (notebook 01), on real gloo ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist

from helpers import start_cluster
from helpers.machine.backends import P2P_PROBES, backend_works, probe_support


def test_p2p_probes_need_two_ranks(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "s"), 1),
                            rank=0, world_size=1)
    try:
        table = probe_support(torch.device("cpu"), probes=P2P_PROBES)
    finally:
        dist.destroy_process_group()
    assert table == {name: "n/a: needs 2 ranks" for name in P2P_PROBES}


def test_gloo_has_tags_and_receives_from_any_source_on_three_ranks():
    with start_cluster(n=3, activate=False) as cluster:
        cluster.view.execute(
            "from helpers.machine.backends import P2P_PROBES, backend_works, probe_support\n"
            "p2p = probe_support(device, probes=P2P_PROBES)\n"
            "t = torch.ones(1); dist.all_reduce(t); after = t.item()"  # the group still works
        )
        tables = cluster.view["p2p"]
        assert tables == [{"send/recv tags": "yes", "recv from any source": "yes"}] * 3, tables
        assert cluster.view["after"] == [3.0] * 3
        # on a group that leaves rank 0 out, peers are group ranks translated to global ranks
        cluster.view.execute(
            "from helpers.machine.backends import PROBES\n"
            "sub = dist.new_group([1, 2])\n"
            "sub_table = probe_support(device, sub, {**PROBES, **P2P_PROBES}) if rank else None"
        )
        sub_tables = cluster.view["sub_table"]
        assert sub_tables[0] is None and sub_tables[1] == sub_tables[2], sub_tables
        wrong = {op: v for op, v in sub_tables[1].items() if not (v == "yes" or v.startswith("no"))}
        assert not wrong, wrong
        for op in ["batch_isend_irecv", "broadcast", "send/recv tags", "recv from any source"]:
            assert sub_tables[1][op] == "yes", (op, sub_tables[1][op])


def test_the_product_probe_allows_float32s_rounding_of_n_factorial_and_nothing_more():
    """At 16 ranks the product of 1..16 has more significant bits than a float32 holds: the
    probe compares within float32's rounding, and still tells a wrong product."""
    import math

    exact = float(math.factorial(16))
    rounded = torch.arange(1.0, 17.0).prod().item()  # float32, as the probe's tensors are
    assert rounded != exact and math.isclose(rounded, exact, rel_tol=1e-6)
    assert not math.isclose(rounded * 16 / 15, exact, rel_tol=1e-6)


def test_backend_works_names_the_gloo_operation_and_keeps_the_profilers_lines_out(capfd):
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        works = backend_works(lambda: dist.all_reduce(torch.ones(3)))
    finally:
        dist.destroy_process_group()
    assert works == ["gloo:all_reduce"]
    assert "profiler_" not in capfd.readouterr().err
