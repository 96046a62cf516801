"""Graph execution charges independent of program order (issue 17, item 5): the schedule, SBUF
residency, fusion groups and every op's charge follow the dataflow graph, not the order in
which independent ops were issued, so a harmless reorder is never a regression."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.graph import Node, Placement, _dependencies, schedule
from pytest_neuronprof.gate.summary import summarize
from pytest_neuronprof.vocabulary import Engine

T, V, S = Engine.TENSOR, Engine.VECTOR, Engine.SCALAR
BW = 1000.0  # bytes per us: 1 kB costs 1 us


def node(index: int, engine: Engine, busy: float = 0.0, reads: int = 0, writes: int = 0,
         inputs=(), outputs=(), name: str = "") -> Node:
    return Node(index=index, engine=engine, busy={engine: busy} if busy else {},
                read_bytes=reads, write_bytes=writes, inputs=list(inputs), outputs=list(outputs),
                name=name)


def renumbered(nodes: list[Node], order: list[int]) -> list[Node]:
    """``nodes`` issued in another program order: nodes[order[k]] becomes the k-th, index k."""
    return [dataclasses.replace(nodes[i], index=k) for k, i in enumerate(order)]


def placed(plan, order: list[int]) -> dict[int, tuple]:
    """A reordered schedule's placements under the original indices (groups mapped too)."""
    def fields(p: Placement) -> tuple:
        return (p.charged_us, p.start_us, p.duration_us, p.memory_us, p.resident_read,
                p.resident_written, -1 if p.group < 0 else order[p.group])
    return {order[k]: fields(p) for k, p in plan.placements.items()}


def two_branches() -> list[Node]:
    """Two independent branches: a matrix product (10 us, 3 kB intermediate) feeding another
    one, and a VectorE op (4 us, 2 kB intermediate) feeding a matrix product. With 3.5 kB of
    SBUF only one intermediate fits: in program order the first one issued took it."""
    return [node(0, T, 10.0, reads=1000, writes=3000, inputs=[(1, 1000)], outputs=[(2, 3000)]),
            node(1, T, 2.0, reads=3000, writes=500, inputs=[(2, 3000)], outputs=[(3, 500)]),
            node(2, V, 4.0, reads=800, writes=2000, inputs=[(11, 800)], outputs=[(12, 2000)]),
            node(3, T, 1.0, reads=2000, writes=500, inputs=[(12, 2000)], outputs=[(13, 500)])]


@pytest.mark.parametrize("order", [[2, 3, 0, 1], [2, 0, 3, 1], [0, 2, 1, 3]])
def test_two_independent_branches_are_charged_alike_in_any_program_order(order):
    nodes = two_branches()
    first = schedule(nodes, BW, sbuf_bytes=3500)
    again = schedule(renumbered(nodes, order), BW, sbuf_bytes=3500)
    assert placed(again, order) == placed(first, list(range(4)))
    assert again.makespan_us == first.makespan_us
    # one intermediate stayed on chip, the same one both times
    assert sorted(p.resident_written for p in first.placements.values()) == [0, 0, 0, 3000]


def test_which_of_two_independent_ops_pays_does_not_depend_on_which_came_first():
    mm = node(0, T, 10.0, inputs=[(1, 0)], outputs=[(2, 0)], name="aten::mm")
    add = node(1, V, 4.0, inputs=[(3, 0)], outputs=[(4, 0)], name="aten::add")
    a = schedule([mm, add], BW, 1e12)
    b = schedule(renumbered([mm, add], [1, 0]), BW, 1e12)
    assert a.makespan_us == b.makespan_us == pytest.approx(10.0)
    assert (a.placements[0].charged_us, a.placements[1].charged_us) == \
        (b.placements[1].charged_us, b.placements[0].charged_us)
    assert sorted(p.charged_us for p in a.placements.values()) == [0.0, 10.0]


def test_an_in_place_write_stays_after_the_reads_of_the_version_it_replaces():
    # x (from outside) is read by a 5 us op, then rewritten in place by a 1 us op on the same
    # engine; the rewrite would sort first by its content, but must queue after the read.
    read = node(0, V, 5.0, inputs=[(1, 100)], outputs=[(2, 100)], name="aten::exp")
    rewrite = node(1, V, 1.0, inputs=[(1, 100)], outputs=[(1, 100)], name="aten::add_")
    later = node(2, V, 1.0, inputs=[(1, 100)], outputs=[(3, 100)], name="aten::neg")  # the new x
    plan = schedule([read, rewrite, later], BW, 1e12)
    assert plan.placements[1].start_us == pytest.approx(5.0)
    assert plan.placements[2].start_us == pytest.approx(6.0)
    assert plan.placements[2].resident_read == 100  # reads the rewritten version, on chip


def test_identical_independent_ops_share_their_charges_in_any_order():
    # Four equal products of two equal inputs: whichever runs first, the multiset is the same.
    nodes = [node(i, T, 3.0, reads=100, writes=100, inputs=[(10 + i, 100)], outputs=[(20 + i, 100)],
                  name="aten::mm") for i in range(4)]
    plans = [schedule(renumbered(nodes, o), BW, 1e12) for o in ([0, 1, 2, 3], [3, 1, 0, 2])]
    charges = [sorted(p.charged_us for p in plan.placements.values()) for plan in plans]
    assert charges[0] == charges[1]


# --- real models on meta, forward + backward + optimizer step, trn2 graph -----------------------


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int, up_first: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.up_first = up_first

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.up_first:
            u = self.up(h)
            g = self.gate(h)
        else:
            g = self.gate(h)
            u = self.up(h)
        return self.down(F.silu(g) * u)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, order: str) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.heads, self.order = heads, order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        made = {}
        for name in self.order:  # the projections in the order given, e.g. "qkv" or "vkq"
            made[name] = getattr(self, name)(x).view(b, s, self.heads, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(made["q"], made["k"], made["v"], is_causal=True)
        return x + self.o(a.transpose(1, 2).reshape(b, s, d))


def train_step_summary(model: nn.Module, shape: tuple[int, ...]) -> dict:
    with torch.device("meta"):
        model = model.to(torch.bfloat16)
        x = torch.randn(*shape, dtype=torch.bfloat16)
        target = torch.randn(*shape, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with NeuronProfiler(NeuronConfig(hardware="trn2", execution="graph")) as prof:
        F.mse_loss(model(x), target).backward()
        opt.step()
    return json.loads(json.dumps(summarize(prof.result, "3", "2.13").to_json()))


def meta(build):
    with torch.device("meta"):
        return build()


def test_a_swiglu_block_costs_the_same_with_gate_or_up_computed_first():
    shape = (4, 512, 1024)
    gate_first = train_step_summary(meta(lambda: SwiGLU(1024, 2816, up_first=False)), shape)
    up_first = train_step_summary(meta(lambda: SwiGLU(1024, 2816, up_first=True)), shape)
    assert up_first == gate_first
    ops = gate_first["ops"]
    assert ops["aten::mm"]["count"] == 7  # 3 forward; backward: 2 for down, 1 each for gate, up
    assert ops["aten::mse_loss_backward"]["count"] == 1


def test_an_attention_block_costs_the_same_in_any_order_of_its_projections():
    summaries = [train_step_summary(meta(lambda: Attention(512, 8, order)), (2, 256, 512))
                 for order in ("qkv", "vkq", "kvq")]
    assert summaries[1] == summaries[0] and summaries[2] == summaries[0]
    assert summaries[0]["ops"]["aten::addmm"]["count"] == 4


# --- byte-identical baselines through the plugin -------------------------------------------------

BASELINE_TEST = """
import pytest, torch
import torch.nn.functional as F


@pytest.mark.neuron_profile(hardware="trn2")
def test_block():
    with torch.device("meta"):
        wg, wu, wd = (torch.randn(1024, 2816, dtype=torch.bfloat16, requires_grad=True)
                      for _ in range(3))
        h = torch.randn(2048, 1024, dtype=torch.bfloat16)
    {first}
    {second}
    y = (F.silu(g) * u) @ wd.t()
    y.square().mean().backward()
    with torch.no_grad():
        for w in (wg, wu, wd):
            w.sub_(w.grad, alpha=1e-3)
"""


def test_permuting_independent_statements_records_byte_identical_baselines(pytester):
    pytester.makeini("[pytest]\n")
    recorded = []
    for first, second in (("g = h @ wg", "u = h @ wu"), ("u = h @ wu", "g = h @ wg")):
        pytester.makepyfile(test_order=BASELINE_TEST.format(first=first, second=second))
        baseline = pytester.path / "baselines" / "test_order.json"
        baseline.unlink(missing_ok=True)
        result = pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline",
                                    "--neuron-execution", "graph")
        result.assert_outcomes(passed=1)
        recorded.append(baseline.read_bytes())
    assert recorded[1] == recorded[0]
    entry = json.loads(recorded[0])["tests"]["test_order.py::test_block"]["simulated:trn2:graph"]
    assert entry["ops"]["aten::mm"]["count"] == 7  # 3 forward; backward: 1 each for g, u, 2 for y


def random_program(rng: random.Random, size: int = 40) -> list[Node]:
    """A random dataflow: ops of random engines, times and sizes reading earlier ops' tensors
    or tensors from outside the region, some rewriting a tensor in place."""
    nodes: list[Node] = []
    made: list[tuple[int, int]] = []  # tensors written so far: (id, bytes)
    for i in range(size):
        engine = rng.choice([T, V, S, Engine.GPSIMD, Engine.DMA])
        inputs = [rng.choice(made) if made and rng.random() < 0.8
                  else (1000 + 2 * i + j, rng.randrange(1, 5) * 500)  # from outside the region
                  for j in range(rng.randrange(1, 3))]
        if inputs[0][0] < 1000 and rng.random() < 0.15:
            outputs = [inputs[0]]  # in place
        else:
            outputs = [(i, rng.randrange(1, 9) * 250)]
            made.append(outputs[0])
        busy: dict[Engine, float] = {engine: rng.randrange(1, 200) / 10}
        if engine is Engine.DMA:
            busy = {}
        nodes.append(Node(index=i, engine=engine, busy=busy, inputs=inputs, outputs=outputs,
                          read_bytes=sum(b for _, b in inputs), write_bytes=outputs[0][1],
                          name=f"op{rng.randrange(4)}", kind="matmul" if engine is T else ""))
    return nodes


def another_program_order(rng: random.Random, nodes: list[Node]) -> list[int]:
    """A random order of ``nodes`` that keeps every dependence: reads after the write they read,
    rewrites after the reads and the write of the version they replace."""
    prior = _dependencies(nodes)[2]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(nodes):
        ready = [n.index for n in nodes if n.index not in done and prior[n.index] <= done]
        pick = rng.choice(ready)
        done.add(pick)
        order.append(pick)
    return order


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_are_charged_alike_in_any_order_that_keeps_their_dependences(seed):
    rng = random.Random(seed)
    nodes = random_program(rng)
    order = another_program_order(rng, nodes)
    assert order != sorted(order)
    for sbuf in (1e12, 2000):  # everything fits; residency decided by the order of allocation
        first = schedule(nodes, BW, sbuf)
        again = schedule(renumbered(nodes, order), BW, sbuf)
        assert placed(again, order) == placed(first, list(range(len(nodes))))
        assert again.makespan_us == first.makespan_us
