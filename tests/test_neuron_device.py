"""The simulated neuron device (issue 30): Trainium-style tests run unchanged under the simulator.

The device renames torch's PrivateUse1 backend, which cannot be undone in a process, so every
check that needs it runs in a pytest subprocess whose conftest.py turns it on at
pytest_configure (what --neuron-device-alias does): tests/neuron_device_checks.py (the device's
behaviour, value reads, torch.accelerator, DataLoader, autocast, torch.compile, numbers equal to
meta's), the bundled Trainium-style example against the same file on meta, the option itself, and
the docs' transformers decode loop. What needs no device runs here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from pytest_neuronprof.profiler import neuron_device
from pytest_neuronprof.profiler.neuron_device import NeuronDeviceError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TURN_ON = """
def pytest_configure(config):
    from pytest_neuronprof.profiler.neuron_device import session_alias

    session_alias("simulated")
"""


@pytest.fixture(autouse=True)
def _never_in_this_process():
    yield
    assert not neuron_device.is_enabled(), "a test turned the neuron device on in the test process"


def doc_block(page: str, contains: str) -> str:
    text = (ROOT / "docs" / "guide" / page).read_text()
    found = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if contains in b]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {contains!r}"
    return found[0]


def _lean(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest\n")


@pytest.mark.slow
def test_the_device_inside_a_session(pytester: pytest.Pytester):
    """tests/neuron_device_checks.py, in a session that turned the device on."""
    _lean(pytester)
    pytester.makeconftest(TURN_ON)
    shutil.copy(EXAMPLES / "models.py", pytester.path / "models.py")
    shutil.copy(Path(__file__).parent / "neuron_device_checks.py", pytester.path / "test_checks.py")
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("error", 0) == 0, result.stdout.str()
    assert outcomes["passed"] >= 40


def _baseline_entries(path: Path, file: str) -> dict:
    tests = json.loads(path.read_text())["tests"]
    return {test.split("::", 1)[1]: variants for test, variants in tests.items()
            if test.startswith(file)}


@pytest.mark.slow
def test_the_trainium_example_costs_what_the_same_test_on_meta_costs(pytester: pytest.Pytester):
    """examples/test_trainium_style.py, and the same file with "neuron" written "meta": the
    baselines both record, in eager and graph execution, are the same numbers."""
    _lean(pytester)
    pytester.makeconftest(TURN_ON)
    shutil.copy(EXAMPLES / "models.py", pytester.path / "models.py")
    source = (EXAMPLES / "test_trainium_style.py").read_text()
    assert source.count('"neuron"') >= 5
    pytester.makepyfile(test_on_neuron=source, test_on_meta=source.replace('"neuron"', '"meta"'))
    baselines = pytester.path / "baselines"
    recorded = []
    for _ in range(2):  # recorded twice: the same bytes
        for execution in ("eager", "graph"):
            result = pytester.runpytest_subprocess("--neuron-baseline", "--neuron-execution",
                                                   execution, "-p", "no:randomly")
            result.assert_outcomes(passed=4)
        recorded.append({p.name: p.read_bytes() for p in sorted(baselines.glob("*.json"))})
        shutil.rmtree(baselines) if not recorded[1:] else None
    assert recorded[0] == recorded[1] and len(recorded[0]) == 2
    on_neuron = _baseline_entries(baselines / "test_on_neuron.json", "test_on_neuron.py")
    on_meta = _baseline_entries(baselines / "test_on_meta.json", "test_on_meta.py")
    assert set(on_neuron) == {"test_training_step", "test_inference_bf16"}
    assert on_neuron == on_meta
    assert set(on_neuron["test_training_step"]) == {"simulated:trn2", "simulated:trn2:graph"}


@pytest.mark.slow
def test_the_option_turns_the_device_on_for_the_session(pytester: pytest.Pytester):
    """--neuron-device-alias and its ini twin turn the device on before test modules import;
    --neuron-disable leaves it on; a measured backend leaves it off and the header says so; a
    value read in a test fails naming the test's line; a meta read too."""
    _lean(pytester)
    pytester.makepyfile(test_device="""
        import pytest
        import torch

        DEVICE = torch.device("neuron")  # at import: the device is on before test modules load


        @pytest.fixture
        def model():
            return torch.nn.Linear(64, 64).to("neuron")


        @pytest.mark.neuron_profile
        def test_step(model):
            y = model(torch.randn(8, 64, device=DEVICE))
            assert y.device.type == "neuron"


        def test_reads(model):
            loss = model(torch.randn(8, 64, device="neuron")).sum()
            assert loss.item() > 0


        def test_reads_on_meta():
            assert torch.ones(2, device="meta").sum() > 0
    """)
    result = pytester.runpytest_subprocess("--neuron-device-alias")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "pytest-neuronprof: neuron device alias: on, torch.device('neuron') is the simulated*",
        "E *ValueReadError: test_device.py:20 reads a value (.item()) of a tensor of the "
        "simulated neuron device*",
        "E *ValueReadError: test_device.py:24 reads a value (.item(), bool(), int(), float()) "
        "of a meta tensor*",
    ])
    assert "cannot be called on meta tensors" not in result.stdout.str()
    assert "test_device.py::test_step" in result.stdout.str()  # profiled: in the summary table

    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:hypothesispytest\n"
                     "neuron_device_alias = true\n")
    result = pytester.runpytest_subprocess("--neuron-disable", "-k", "test_step")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*neuron device alias: on*", "*profiling was off*"])

    result = pytester.runpytest_subprocess("--neuron-backend", "cpu", "-k", "test_step")
    result.stdout.fnmatch_lines(["*neuron device alias: off, the cpu backend measures a real device*"])
    assert result.ret != 0  # the module's torch.device("neuron") fails: no device


@pytest.mark.slow
def test_backward_runs_after_a_backward_before_the_device(pytester: pytest.Pytester):
    """A conftest that ran a backward before the option turned the device on (autograd then
    sized its device threads with none for neuron: torch's internal assert in backward()): a
    training step on neuron still runs, its backward on the test's thread, and is costed as
    the same step on meta."""
    _lean(pytester)
    pytester.makeconftest("""
        import torch

        x = torch.ones(2, requires_grad=True)
        x.sum().backward()  # at import, before pytest_configure turns the device on
    """)
    pytester.makepyfile(test_train="""
        import threading

        import pytest
        import torch

        from pytest_neuronprof import NeuronProfiler


        @pytest.mark.parametrize("device", ["neuron", "meta"])
        def test_step(device):
            model = torch.nn.Linear(64, 64, device=device)
            x = torch.randn(8, 64, device=device, requires_grad=True)
            threads = []
            x.register_hook(lambda grad: threads.append(threading.current_thread()))
            with NeuronProfiler() as prof:
                model(x).sum().backward()
            assert threads == [threading.current_thread()]
            assert model.weight.grad.shape == (64, 64) and model.weight.grad.device.type == device
            print(f"TOTAL {device} {prof.result.total_device_time_us!r} {len(prof.result.records)}")
    """)
    result = pytester.runpytest_subprocess("--neuron-device-alias", "-s")
    result.assert_outcomes(passed=2)
    totals = {device: numbers for device, *numbers in
              re.findall(r"TOTAL (\w+) (\S+) (\d+)", result.stdout.str())}
    assert len(totals) == 2 and totals["neuron"] == totals["meta"], result.stdout.str()

@pytest.mark.slow
def test_a_registered_privateuse1_backend_keeps_the_device_off(pytester: pytest.Pytester):
    """Where PrivateUse1 is taken (TorchNeuron installed), the session keeps the real device:
    the option says so, and enable() itself refuses."""
    _lean(pytester)
    pytester.makeconftest("""
        import torch

        torch.utils.rename_privateuse1_backend("neuron")  # what TorchNeuron does at import


        def pytest_configure(config):
            from pytest_neuronprof.profiler.neuron_device import session_alias

            config.neuron_line = session_alias("simulated")


        def pytest_report_header(config):
            return config.neuron_line
    """)
    pytester.makepyfile(test_it="""
        import pytest
        from pytest_neuronprof.profiler import neuron_device


        def test_refused():
            assert not neuron_device.is_enabled()
            with pytest.raises(neuron_device.NeuronDeviceError, match="registered already as 'neuron'"):
                neuron_device.enable()
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["neuron device alias: off, PrivateUse1 is registered already as "
                                 "'neuron' (TorchNeuron, or another backend): its real device is used*"])


transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_the_guides_llama_decodes_on_the_device_as_shown(pytester: pytest.Pytester):
    """docs/guide/hardware-and-devices.md's transformers block, run as it is: a Llama from its
    config, moved to neuron, decodes 16 tokens with its cache under the simulator."""
    _lean(pytester)
    pytester.makeconftest(TURN_ON)
    pytester.makepyfile(test_decode=doc_block("hardware-and-devices.md", "def test_greedy_decode"))
    result = pytester.runpytest_subprocess("--neuron-baseline")
    result.assert_outcomes(passed=1)
    entries = _baseline_entries(pytester.path / "baselines" / "test_decode.json", "test_decode.py")
    ops = entries["test_greedy_decode"]["simulated:trn2"]["ops"]
    assert ops["aten::mm"]["count"] >= 17 * 4 * 7  # 17 forwards, 4 layers, 7 projections each
    assert "aten::_scaled_dot_product_flash_attention" in ops


def test_an_older_torch_is_refused_with_the_version_it_needs(monkeypatch):
    """A torch without the Python backend hooks (torch < 2.10): the option stops the session
    with what is missing and the torch it needs; nothing is renamed."""
    monkeypatch.setattr(neuron_device, "REQUIRED", (
        ("torch._C._acc.PrivateUse1Hooks", lambda: torch._C._acc.NoSuchHooks),
        *neuron_device.REQUIRED[2:]))
    reason = neuron_device.unavailable_reason()
    assert reason == ("the simulated neuron device needs torch's Python backend hooks "
                      "(torch._C._acc.PrivateUse1Hooks), which torch "
                      f"{torch.__version__} does not have: they came after torch 2.9 "
                      "(torch>=2.10); upgrade torch, or leave the option off and build models "
                      "on cpu or meta")
    with pytest.raises(NeuronDeviceError, match=r"^--neuron-device-alias: the simulated neuron"):
        neuron_device.enable()
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


def test_a_measured_backend_leaves_the_device_off():
    assert neuron_device.session_alias("cpu") == (
        "neuron device alias: off, the cpu backend measures a real device "
        "(--neuron-device-alias applies to the simulated backend)")


def test_the_device_has_a_kernel_wherever_meta_has_one():
    ops = neuron_device.backend_ops()
    assert "aten::empty.memory_format" in ops and "aten::mm" in ops
    assert "aten::silu_backward" in ops  # a composite with meta's own kernel: the same choice
    assert all(torch._C._dispatch_has_kernel_for_dispatch_key(op, "Meta") for op in ops)
