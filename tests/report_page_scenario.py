"""A session's outcomes from real simulated profiles, for the HTML page's tests: a regression
(sdpa replaced by eager attention), a change accepted with a reason, a test on two chips, one
with no baseline, one whose peak does not fit its memory limit, and a history of commits for
the regressed test's trend chart. Profiled once per process (a transformer block's forward: well
under a second)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.gate.accepted import with_reason
from pytest_neuronprof.gate.judge import judge
from pytest_neuronprof.gate.compare import GatePolicy, Status, compare, uncompared
from pytest_neuronprof.gate.history import HistoryPoint
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import ProfileSummary, summarize

REGRESSED = "tests/test_llama.py::test_attention_block"
ACCEPTED = "tests/test_llama.py::test_wider_mlp"
CHIPS = "tests/test_mlp.py::test_block_on_two_chips"
NEW = "tests/test_new.py::test_fresh[bf16<fp32]"  # '<' is escaped on the page
UNCHANGED = "tests/test_a.py::test_unchanged"
TOO_BIG = "tests/test_big.py::test_does_not_fit"
REASON = "wider MLP for quality, see #12"


class Block(nn.Module):
    """A transformer block whose attention is sdpa (one fused op) or eager (bmm, softmax, bmm)."""

    def __init__(self, d: int = 256, heads: int = 4, hidden: int = 1024, eager: bool = False) -> None:
        super().__init__()
        self.heads, self.eager = heads, eager
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        if self.eager:
            scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            y = scores.softmax(-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


@functools.lru_cache(maxsize=None)
def run(hardware: str = "trn2", eager: bool = False, hidden: int = 1024) -> tuple[ProfileSummary, Any, tuple]:
    """(the summary, the utilisation and the recommendations) of the block's forward."""
    torch.manual_seed(0)
    block = Block(hidden=hidden, eager=eager).to(torch.bfloat16)
    x = torch.randn(4, 256, 256, dtype=torch.bfloat16)
    with torch.no_grad(), NeuronProfiler(NeuronConfig(hardware=hardware, profile_output_dir=None)) as prof:
        block(x)
    result = prof.result
    return summarize(result, "test", torch.__version__), result.utilisation, tuple(result.recommendations())


def profile(hardware: str = "trn2", eager: bool = False, hidden: int = 1024) -> ProfileSummary:
    return run(hardware, eager, hidden)[0]


def why(hardware: str = "trn2", eager: bool = False, hidden: int = 1024) -> dict[str, Any]:
    """What an outcome of the block's run says of why it is slow (TestOutcome's fields)."""
    _, found, advice = run(hardware, eager, hidden)
    return {"utilisation": found, "recommendations": advice}


def history(values_us: list[float]) -> list[HistoryPoint]:
    subjects = ["Add the attention block", "Fuse the QKV projection", "Record on torch 2.13",
                "Longer sequences in the test", "Cache the mask"]
    return [HistoryPoint(f"{i + 1:x}" * 40, f"2025-0{i + 1}-1{i}", subjects[i % len(subjects)],
                         REGRESSED, "simulated:trn2", us, None, None)
            for i, us in enumerate(values_us)]


def outcomes() -> list[TestOutcome]:
    policy = GatePolicy()
    base, slow = profile(), profile(eager=True)
    wide = profile(hidden=1536)
    own = with_reason(wide, base, REASON)
    accepted = judge(wide, base, lambda marker: policy, own=own)
    h200 = profile("h200")
    limited = replace(policy, memory_limit=1024, memory_limit_label="memory_limit 1 KiB")
    return [
        TestOutcome(UNCHANGED, ("tests/test_a.py", 3), compare(base, base, policy), base, base, **why()),
        TestOutcome(ACCEPTED, ("tests/test_llama.py", 30), accepted, wide, base, **why(hidden=1536)),
        TestOutcome(CHIPS, ("tests/test_mlp.py", 8), compare(base, base, policy), base, base, **why()),
        TestOutcome(CHIPS, ("tests/test_mlp.py", 8), compare(h200, h200, policy), h200, h200, **why("h200")),
        TestOutcome(NEW, ("tests/test_new.py", 5), uncompared(base, policy, Status.NO_BASELINE, "no baseline"),
                    base, None, **why()),
        TestOutcome(REGRESSED, ("tests/test_llama.py", 12), compare(base, slow, policy), slow, base,
                    **why(eager=True)),
        TestOutcome(TOO_BIG, ("tests/test_big.py", 2),
                    uncompared(base, limited, Status.NO_BASELINE, "no baseline"), base, None, **why()),
    ]


def trends() -> dict[tuple[str, str], list[HistoryPoint]]:
    """The regressed test's history: four commits, the last one its baseline's numbers."""
    total = profile().total_device_time_us
    return {(REGRESSED, "simulated:trn2"): history([total * 1.18, total * 1.25, total * 0.97, total])}


def main(argv: list[str]) -> None:
    """Write the page of docs/images/report-page.png: ``python tests/report_page_scenario.py
    build/report-page-docs``, then ``chromium --headless --hide-scrollbars --window-size=1280,2700
    --screenshot=docs/images/report-page.png build/report-page-docs/index.html`` (the does-not-fit
    test left out, so that the regression's section comes first)."""
    from pathlib import Path

    from pytest_neuronprof.outputs.html import PAGE_NAME, render_page

    folder = Path(argv[0] if argv else "build/report-page-docs")
    folder.mkdir(parents=True, exist_ok=True)
    page = render_page([o for o in outcomes() if o.nodeid != TOO_BIG], None, trends())
    (folder / PAGE_NAME).write_text(page, encoding="utf-8")
    print(folder / PAGE_NAME)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
