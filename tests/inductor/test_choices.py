"""The Inductor choices handler, its knobs and install(), on the CPU with torch's real KTC classes."""

from __future__ import annotations

import copy
import logging
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.kernel_template_choice import KernelTemplateChoice  # noqa: E402
from torch._inductor.template_heuristics.params import DictKernelTemplateParams  # noqa: E402
from torch._inductor.virtualized import V  # noqa: E402

import kernel_select.knobs as ks_config  # noqa: E402
import kernel_select.inductor as ks_inductor  # noqa: E402
from kernel_select import runtime  # noqa: E402
from tests.subprocess_env import package_env  # noqa: E402
from tests.inductor_doubles import BrokenModel, FakeLUT, FakeModel, expected_top  # noqa: E402
from kernel_select.configs import GemmConfig  # noqa: E402
from kernel_select.errors import OptionError  # noqa: E402
from kernel_select.problem import Problem  # noqa: E402
from kernel_select.space import for_problem  # noqa: E402

SEED = Problem(560, 1280, 3420, "bfloat16")
LUT_A = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
LUT_B = GemmConfig(block_m=128, block_n=64, block_k=32, num_stages=4, num_warps=8)
INDUCTOR_FIRST = {"EVEN_K": False, "USE_FAST_ACCUM": False, "ACC_TYPE": "tl.float32", "num_stages": 1,
                  "num_warps": 2, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "hint_override": None,
                  "GROUP_M": 8}


class FakeTemplate:
    def __init__(self, uid: str) -> None:
        self.uid = uid


class FakeInputs:
    """What the handler reads from Inductor's MMKernelInputs."""

    def __init__(self, m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16, device_type: str = "cuda",
                 batch: int = 1, k_symbolic: object = None) -> None:
        self.m, self.n, self.k, self.batch = m, n, k, batch
        self._dtype, self.device_type = dtype, device_type
        self.k_symbolic = k if k_symbolic is None else k_symbolic

    def mnk_hinted(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k

    def mnk_symbolic(self) -> tuple[object, object, object]:
        return self.m, self.n, self.k_symbolic

    def batch_hinted(self) -> int:
        return self.batch

    def dtype(self, idx: int = 0) -> torch.dtype:
        return self._dtype

    def device(self) -> torch.device:
        return torch.device(self.device_type, 0)


def ktc(uid: str, inputs: FakeInputs, **params: object) -> KernelTemplateChoice:
    return KernelTemplateChoice(template=FakeTemplate(uid), params=DictKernelTemplateParams(dict(params)),
                                extra_kwargs={"ALLOW_TF32": False}, layout="layout", inputs=inputs)


def inductor_candidates(inputs: FakeInputs, triton_uid: str = "triton::mm") -> dict[str, list]:
    """Inductor-like template choices: one ATen, 20 Triton, one decompose_k."""
    triton = [ktc(triton_uid, inputs, **{**INDUCTOR_FIRST, "num_stages": 1 + i % 5}) for i in range(20)]
    return {"aten::mm": [ktc("aten::mm", inputs)], triton_uid: triton,
            "decompose_k": [ktc("decompose_k", inputs, k_split=4)]}


def finalize(handler, inputs, candidates, op="mm", overrides=None):  # noqa: ANN001, ANN201
    generators = {uid: iter(items) for uid, items in candidates.items()}
    return handler._finalize_template_configs(generators, inputs, [FakeTemplate(u) for u in candidates], op,
                                              overrides)


def triton_of(result: list, uid: str = "triton::mm") -> list:  # noqa: ANN001
    return [c for c in result if c.template.uid == uid]


def params_config(choice: KernelTemplateChoice) -> GemmConfig:
    return GemmConfig.from_inductor_kwargs(choice.params.to_kwargs())


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    # The cuBLAS gate is off here (the tests below that are about it turn it on): these tests pin
    # exact selections, which must not depend on whether the shipped gate skips a problem.
    with ks_config.patch(topk="DEFAULT", kernel_lut_path=None, model=None, device=None, cublas_margin=None):
        yield
    while ks_inductor.uninstall():
        pass


@pytest.fixture
def lut_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LUT file with two entries for SEED; its text picks the entries the fake loader returns."""
    path = tmp_path / "lut.json"
    path.write_text("seed-v1")

    def read(p: str) -> FakeLUT:
        text = Path(p).read_text()
        if not text.startswith("seed"):
            from kernel_select.errors import LUTError

            raise LUTError(f"{p}: not a kernel lookup table")
        return FakeLUT({(560, 1280, 3420, "bfloat16"): [LUT_A, LUT_B]}, tag=text)

    monkeypatch.setattr(runtime, "_read_lut", read)
    return path


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("kernel_select.inductor") and r.levelno == logging.WARNING]


# -- selection ------------------------------------------------------------------------------------

def test_triton_candidates_become_topk_with_lut_entries_first(lut_file: Path):
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    model = FakeModel()
    handler = ks_inductor.KernelSelectChoices(topk=4, kernel_lut_path=str(lut_file), model=model,
                                              device="h100")

    result = finalize(handler, inputs, candidates)

    triton = [c for c in result if c.template.uid == "triton::mm"]
    assert [params_config(c) for c in triton] == expected_top(SEED, 4, pinned=[LUT_A, LUT_B])
    assert model.calls == 1  # one batched estimate over the whole space
    selection = handler.selections[-1]
    assert selection.sources[:2] == ("lut", "lut") and selection.space_size == len(for_problem(SEED, "h100"))


def test_configs_come_from_the_exhaustive_space_not_inductors_list():
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(topk=8, model=FakeModel(), device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    chosen = [params_config(c) for c in triton]
    assert chosen == expected_top(SEED, 8)
    assert len(set(chosen)) == 8
    inductor_defaults = {params_config(c) for c in inductor_candidates(inputs)["triton::mm"]}
    assert not set(chosen) & inductor_defaults  # none of them came from Inductor's 20


def test_aten_and_other_templates_pass_through_in_order():
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(topk=2, model=FakeModel(), device="h100")
    result = finalize(handler, inputs, candidates)
    assert result[0] is candidates["aten::mm"][0]
    assert result[-1] is candidates["decompose_k"][0]
    assert [c.template.uid for c in result] == ["aten::mm", "triton::mm", "triton::mm", "decompose_k"]


def test_synthesized_candidates_keep_inductors_problem_kwargs_and_extras():
    inputs = FakeInputs(512, 1024, 4096)
    candidates = inductor_candidates(inputs)
    base = candidates["triton::mm"][0]
    base.params = DictKernelTemplateParams({**INDUCTOR_FIRST, "ACC_TYPE": "tl.float16", "FUTURE_KNOB": 7})
    handler = ks_inductor.KernelSelectChoices(topk=3, model=FakeModel(), device="h100")

    overrides = {"triton::mm": {"USE_FAST_ACCUM": True}}
    triton = triton_of(finalize(handler, inputs, candidates, overrides=overrides))

    for choice in triton:
        kwargs = choice.params.to_kwargs()
        assert kwargs["EVEN_K"] == (4096 % kwargs["BLOCK_K"] == 0)
        assert kwargs["ACC_TYPE"] == "tl.float16" and kwargs["FUTURE_KNOB"] == 7  # from Inductor's base
        assert kwargs["USE_FAST_ACCUM"] is True  # kwarg_overrides win, as in make_ktc_generator
        assert kwargs["hint_override"] is None and "ALLOW_TF32" not in kwargs
        assert choice.extra_kwargs is base.extra_kwargs
        assert choice.layout is base.layout and choice.inputs is base.inputs
        assert choice.template is base.template


def test_even_k_is_false_when_k_is_symbolic():
    import sympy

    inputs = FakeInputs(256, 256, 4096, k_symbolic=sympy.Symbol("s0", positive=True, integer=True))
    handler = ks_inductor.KernelSelectChoices(topk=4, model=FakeModel(), device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert triton and not any(c.params.to_kwargs()["EVEN_K"] for c in triton)


def test_bmm_uses_the_batch_and_the_bmm_template():
    inputs = FakeInputs(128, 256, 512, batch=6)
    candidates = inductor_candidates(inputs, triton_uid="triton::bmm")
    handler = ks_inductor.KernelSelectChoices(topk=2, model=FakeModel(), device="h100")
    triton = [c for c in finalize(handler, inputs, candidates, op="bmm") if c.template.uid == "triton::bmm"]
    assert len(triton) == 2
    assert handler.selections[-1].problem == Problem(128, 256, 512, "bfloat16", batch=6, op="bmm")


def test_default_topk_benchmarks_as_many_as_inductors_default_list():
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(topk="DEFAULT", model=FakeModel(), device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert len(triton) == len(for_problem(SEED, "h100", "default"))


@pytest.mark.parametrize("case", ["same", "cpu", "op", "dtype", "no-triton", "empty-triton"])
def test_pass_through_cases(case: str):
    inputs = FakeInputs(560, 1280, 3420, dtype=torch.int8 if case == "dtype" else torch.bfloat16,
                        device_type="cpu" if case == "cpu" else "cuda")
    candidates = inductor_candidates(inputs)
    if case == "no-triton":
        del candidates["triton::mm"]
    if case == "empty-triton":  # the template is listed but its heuristic yields nothing
        candidates["triton::mm"] = []
    model = FakeModel()
    topk = "SAME" if case == "same" else 2
    handler = ks_inductor.KernelSelectChoices(topk=topk, model=model, device="h100")
    result = finalize(handler, inputs, candidates, op="mm-ah" if case == "op" else "mm")
    assert result == [c for items in candidates.values() for c in items]
    assert model.calls == 0


# -- failures fall back to Inductor's own candidates -------------------------------------------------

def run_two_gemms(handler, caplog):  # noqa: ANN001, ANN201
    results = []
    for m in (560, 1024):
        inputs = FakeInputs(m, 1280, 3420)
        candidates = inductor_candidates(inputs)
        with caplog.at_level(logging.WARNING, logger="kernel_select.inductor"):
            results.append((finalize(handler, inputs, candidates), candidates))
    return results


@pytest.mark.parametrize("broken", ["lut-garbage", "lut-missing", "model-estimate", "model-name", "inputs"])
def test_failures_fall_back_with_exactly_one_warning(broken: str, lut_file: Path, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture):
    kwargs: dict[str, object] = {"topk": 4, "device": "h100", "model": FakeModel()}
    if broken == "lut-garbage":
        lut_file.write_text("{ this is not a LUT")
        kwargs["kernel_lut_path"] = str(lut_file)
    elif broken == "lut-missing":
        kwargs["kernel_lut_path"] = str(tmp_path / "nope.json")
    elif broken == "model-estimate":
        kwargs["model"] = BrokenModel()
    elif broken == "model-name":
        kwargs["model"] = "no-such-model"
    handler = ks_inductor.KernelSelectChoices(**kwargs)

    if broken == "inputs":
        for m in (560, 1024):
            inputs = FakeInputs(m, 1280, 3420)
            candidates = inductor_candidates(inputs)
            with caplog.at_level(logging.WARNING, logger="kernel_select.inductor"):
                result = finalize(handler, object(), candidates)  # not a KernelInputs at all
            assert result == [c for items in candidates.values() for c in items]
    else:
        for result, candidates in run_two_gemms(handler, caplog):
            assert result == [c for items in candidates.values() for c in items]  # all 22, same objects
    assert len(warnings_of(caplog)) == 1


def test_invalid_torch_option_value_falls_back(caplog: pytest.LogCaptureFixture):
    assert ks_inductor.register_options()
    handler = ks_inductor.KernelSelectChoices(topk=2, model=FakeModel(), device="h100")
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    with inductor_config.patch(gemm_topk="lots"), caplog.at_level(logging.WARNING):
        result = finalize(handler, inputs, candidates)
    assert len(result) == 22
    assert "gemm_topk" in warnings_of(caplog)[0].getMessage()


# -- knobs and precedence --------------------------------------------------------------------------

def test_knobs_validate_on_assignment_and_patch():
    with pytest.raises(OptionError, match="topk"):
        ks_config.topk = 0
    with pytest.raises(OptionError, match="DEFAULT"):
        ks_config.patch(topk="many").__enter__()
    with pytest.raises(OptionError, match="unknown knob"):
        ks_config.patch(top_k=3).__enter__()
    with pytest.raises(OptionError, match="device"):
        ks_config.device = "tpu-v9"
    with ks_config.patch(topk="4", device="NVIDIA H100 80GB HBM3", kernel_lut_path="~/lut.json"):
        assert ks_config.topk == 4 and ks_config.device == "h100"
        assert ks_config.kernel_lut_path == os.path.expanduser("~/lut.json")
    assert ks_config.topk == "DEFAULT" and ks_config.device is None


def test_environment_variables_are_read_and_validated():
    code = "import kernel_select.knobs as c; print(c.topk, c.kernel_lut_path)"
    env = package_env(TORCHINDUCTOR_GEMM_TOPK="same", TORCHINDUCTOR_KERNEL_LUT_PATH="/x/lut.json")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["SAME", "/x/lut.json"]
    env["TORCHINDUCTOR_GEMM_TOPK"] = "-3"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "environment variable TORCHINDUCTOR_GEMM_TOPK" in bad.stderr


def test_precedence_torch_option_over_install_over_knob():
    assert ks_inductor.register_options()
    with ks_config.patch(topk=16):
        assert ks_inductor.KernelSelectChoices().settings().topk == 16
        handler = ks_inductor.KernelSelectChoices(topk=4)
        assert handler.settings().topk == 4
        with inductor_config.patch(gemm_topk=2, kernel_lut_path="per-compile.json"):
            assert handler.settings().topk == 2
            assert handler.settings().kernel_lut_path == "per-compile.json"
        assert handler.settings().topk == 4


# -- cache identity -----------------------------------------------------------------------------

def test_uuid_changes_with_k_lut_contents_model_and_device(lut_file: Path):
    model = FakeModel()

    def uuid(**kw: object) -> str:
        args = {"topk": 4, "kernel_lut_path": str(lut_file), "model": model, "device": "h100", **kw}
        return ks_inductor.KernelSelectChoices(**args).uuid()

    base = uuid()
    assert base == uuid()  # stable
    assert uuid(topk=8) != base
    assert uuid(device="a100") != base
    assert uuid(model=FakeModel(tag="v2")) != base
    assert uuid(kernel_lut_path=None) != base
    lut_file.write_text("seed-v2, edited")
    edited = uuid()
    assert edited != base
    lut_file.write_text("{ broken")  # a broken LUT still yields a key, and a different one
    assert uuid() not in (base, edited)
    assert ks_inductor.KernelSelectChoices(topk="SAME").uuid() != base


def test_factory_pickle_carries_the_uuid_and_copies_are_identity(lut_file: Path):
    factory = ks_inductor.ChoicesFactory(topk=4, kernel_lut_path=str(lut_file), device="h100")
    assert copy.deepcopy(factory) is factory
    first = pickle.dumps(factory)
    lut_file.write_text("seed-v2, edited")
    assert pickle.dumps(factory) != first  # 2.11 hashes this pickle into the FX-graph cache key
    clone = pickle.loads(first)
    assert clone == factory and isinstance(clone(), ks_inductor.KernelSelectChoices)
    with pytest.raises(OptionError, match="model name"):
        ks_inductor.ChoicesFactory(model=FakeModel())


def test_cache_key_config_contains_the_handler_uuid():
    handler = ks_inductor.install(topk=4, device="h100")
    portable = inductor_config.save_config_portable()
    if portable.get("inductor_choices_class") != handler.uuid():  # torch 2.11 pickles the factory
        assert isinstance(portable["inductor_choices_class"], ks_inductor.ChoicesFactory)
    assert portable["gemm_topk"] is None and portable["kernel_lut_path"] is None


# -- install / uninstall ------------------------------------------------------------------------

def test_install_and_uninstall_restore_the_previous_handler_and_config():
    previous_handler = V.choices
    previous_class = inductor_config.inductor_choices_class
    handler = ks_inductor.install(topk=4, device="h100")
    assert V.choices is handler
    assert isinstance(inductor_config.inductor_choices_class, ks_inductor.ChoicesFactory)
    assert inductor_config.inductor_choices_class().settings().topk == 4
    inner = ks_inductor.install(topk=2, device="h100")
    assert V.choices is inner
    assert ks_inductor.uninstall()
    assert V.choices is handler
    assert ks_inductor.uninstall()
    assert V.choices is previous_handler
    assert inductor_config.inductor_choices_class is previous_class
    assert not ks_inductor.uninstall()


def test_enabled_context_manager_restores_on_error():
    previous_handler = V.choices
    with pytest.raises(RuntimeError, match="boom"):
        with ks_inductor.enabled(topk=3, device="h100") as handler:
            assert V.choices is handler and handler.settings().topk == 3
            raise RuntimeError("boom")
    assert V.choices is previous_handler


def test_install_rejects_bad_arguments_before_changing_anything():
    previous_handler = V.choices
    with pytest.raises(OptionError):
        ks_inductor.install(topk=-1)
    with pytest.raises(OptionError):
        ks_inductor.install(kernel_lut_path=42)
    assert V.choices is previous_handler


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = package_env()
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=240)


def test_import_kernel_select_imports_neither_inductor_nor_triton():
    result = run_python("""
        import sys
        import kernel_select
        assert kernel_select.triton_pruner is not None
        bad = [m for m in sys.modules if m.startswith(("torch._inductor", "triton"))]
        assert not bad, bad
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_torch_compile_accepts_the_options_only_after_install():
    result = run_python("""
        import torch
        options = {"gemm_topk": 4, "kernel_lut_path": "luts/h100.json", "max_autotune": True}
        try:
            torch.compile(lambda x: x + 1, options=options)
        except RuntimeError as exc:
            assert "Unexpected optimization option" in str(exc)
        else:
            raise AssertionError("torch knew gemm_topk before install()")
        import kernel_select.inductor as ks
        ks.install(topk=2, device="h100")
        torch.compile(lambda x: x + 1, options=options)
        ks.uninstall()
        torch.compile(lambda x: x + 1, options=options)  # the options stay registered, inert
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_real_cpu_compile_with_handler_installed(monkeypatch: pytest.MonkeyPatch):
    # Through real Inductor lowering (on the CPU every candidate passes through) with the handler
    # installed, the options set per compile and the uuid in the cache key: the result must be right.
    calls = []
    original = ks_inductor.KernelSelectChoices._replace_triton_candidates

    def spy(self, choices, kernel_inputs, op_name, overrides):  # noqa: ANN001, ANN202
        calls.append((op_name, kernel_inputs.device_type, tuple(choices)))
        return original(self, choices, kernel_inputs, op_name, overrides)

    monkeypatch.setattr(ks_inductor.KernelSelectChoices, "_replace_triton_candidates", spy)
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    with ks_inductor.enabled(topk=2, device="h100"), torch.compiler.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, y: x @ y, options={"gemm_topk": 4})
        torch.testing.assert_close(compiled(a, b), a @ b)
    assert calls and calls[0][:2] == ("mm", "cpu") and "aten::mm" in calls[0][2]


# -- the cuBLAS gate ------------------------------------------------------------------------------

class FakeGate:
    """Predicts a fixed cuBLAS / best-Triton time ratio for every problem."""

    def __init__(self, ratio: float, tag: str = "g1") -> None:
        self.ratio, self.tag, self.calls = ratio, tag, 0

    def decide(self, problem: Problem, margin: float):  # noqa: ANN201
        from kernel_select.model.gate import GateDecision

        self.calls += 1
        return GateDecision(problem=problem, predicted_ratio=self.ratio, margin=margin)

    def digest(self) -> str:
        return self.tag


def use_gate(monkeypatch: pytest.MonkeyPatch, gate: object) -> None:
    monkeypatch.setattr(runtime, "gate", lambda device: gate)


def test_gate_that_prefers_cublas_leaves_only_aten_and_other_templates(monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=0.8))
    inputs = FakeInputs(16, 1024, 4096)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(topk=4, model=FakeModel(), device="h100", cublas_margin=0.05)
    result = finalize(handler, inputs, candidates)
    assert [c.template.uid for c in result] == ["aten::mm", "decompose_k"]
    selection = handler.selections[-1]
    assert selection.configs == () and selection.gate.prefers_cublas


def test_gate_keeps_lut_entries_when_it_skips_the_model_ranking(monkeypatch: pytest.MonkeyPatch,
                                                                lut_file: Path):
    use_gate(monkeypatch, FakeGate(ratio=0.5))
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(topk=4, kernel_lut_path=str(lut_file), model=FakeModel(),
                                              device="h100", cublas_margin=0.05)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert [params_config(c) for c in triton] == [LUT_A, LUT_B]


@pytest.mark.parametrize("ratio, margin", [(0.96, 0.05), (1.3, 0.0)])
def test_gate_within_its_margin_changes_nothing(monkeypatch: pytest.MonkeyPatch, ratio: float, margin: float):
    use_gate(monkeypatch, FakeGate(ratio=ratio))
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(topk=4, model=FakeModel(), device="h100", cublas_margin=margin)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert [params_config(c) for c in triton] == expected_top(SEED, 4)
    assert not handler.selections[-1].gate.prefers_cublas


def test_gate_off_is_never_consulted(monkeypatch: pytest.MonkeyPatch):
    gate = FakeGate(ratio=0.1)
    use_gate(monkeypatch, gate)
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(topk=4, model=FakeModel(), device="h100", cublas_margin="off")
    assert len(triton_of(finalize(handler, inputs, inductor_candidates(inputs)))) == 4
    assert gate.calls == 0 and handler.selections[-1].gate is None


def test_gate_off_survives_install_and_the_factory(monkeypatch: pytest.MonkeyPatch):
    gate = FakeGate(ratio=0.1)
    use_gate(monkeypatch, gate)
    with ks_config.patch(cublas_margin=0.05):  # the knob says "on"; the install() argument wins
        handler = ks_inductor.install(topk=4, model="analytical", device="h100", cublas_margin="off")
        rebuilt = inductor_config.inductor_choices_class()  # what Inductor instantiates per compile
        unpickled = pickle.loads(pickle.dumps(inductor_config.inductor_choices_class))()
        assert [h.settings().cublas_margin for h in (handler, rebuilt, unpickled)] == [None, None, None]
        inputs = FakeInputs(560, 1280, 3420)
        assert len(triton_of(finalize(rebuilt, inputs, inductor_candidates(inputs)))) == 4 and gate.calls == 0


def test_uuid_follows_the_gate_margin_and_weights(monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=1.0, tag="weights-1"))
    keys = {margin: ks_inductor.KernelSelectChoices(topk=4, device="h100", cublas_margin=margin).uuid()
            for margin in ("off", 0.05, 0.1)}
    assert len(set(keys.values())) == 3
    use_gate(monkeypatch, FakeGate(ratio=1.0, tag="weights-2"))
    assert ks_inductor.KernelSelectChoices(topk=4, device="h100", cublas_margin=0.05).uuid() != keys[0.05]


def test_broken_gate_file_falls_back_to_inductors_candidates(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture):
    from kernel_select.errors import ModelError

    def broken(device: object) -> None:
        raise ModelError("models/h100/cublas_gate.pt: cannot load the cuBLAS gate (truncated)")

    monkeypatch.setattr(runtime, "gate", broken)
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(topk=4, model=FakeModel(), device="h100", cublas_margin=0.05)
    with caplog.at_level(logging.WARNING):
        result = finalize(handler, inputs, candidates)
    assert triton_of(result) == candidates["triton::mm"]
    assert len(warnings_of(caplog)) == 1 and "cublas_gate.pt" in warnings_of(caplog)[0].getMessage()
    handler.uuid()  # a broken gate never breaks the cache key


def test_cublas_margin_knob_is_validated_and_read_from_the_environment():
    with pytest.raises(OptionError, match="cublas_margin"):
        ks_config.cublas_margin = 1.5
    with pytest.raises(OptionError):
        ks_inductor.install(cublas_margin="sometimes")
    code = "import kernel_select.knobs as c; print(c.cublas_margin)"
    for raw, expected in (("0.1", "0.1"), ("off", "None"), ("", "0.05")):
        out = subprocess.run([sys.executable, "-c", code], env=package_env(TORCHINDUCTOR_GEMM_CUBLAS_MARGIN=raw),
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected
