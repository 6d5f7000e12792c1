"""TF32 as part of the problem: the flag's contract, Inductor's rule (kernel_select.tf32) checked against
the installed Inductor's own heuristic, and what the model, its card and select() make of a TF32 GEMM."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select import api
from kernel_select.configs import torch_minor_version
from kernel_select.decision import select
from kernel_select.errors import OptionError, ProblemError
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.model.card import Domain, outside_domain, stratum
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION, featurize
from kernel_select.problem import TF32, Problem
from kernel_select.space import for_problem
from kernel_select.tf32 import inductor_allow_tf32
from kernel_select.triton_autotune import triton_pruner
from tests.inductor_doubles import FakeModel

SEED_FP32 = Problem(560, 1280, 3420, "float32", layout="nt")


# -- the flag ----------------------------------------------------------------------------------------

def test_tf32_is_part_of_the_problem_and_off_by_default():
    tf32 = Problem(560, 1280, 3420, "float32", tf32=True)
    assert Problem(560, 1280, 3420, "float32").tf32 is False
    assert tf32 != Problem(560, 1280, 3420, "float32")
    assert len({tf32, Problem(560, 1280, 3420, "float32")}) == 2
    assert (tf32.precision, Problem(560, 1280, 3420, "float32").precision) == (TF32, "float32")
    assert str(tf32) == "mm 560x1280x3420 float32 tf32"
    assert str(Problem(560, 1280, 3420, "float32", layout="nt", tf32=True)) == \
        "mm 560x1280x3420 float32 nt tf32"
    assert str(Problem(560, 1280, 3420, "float32")) == "mm 560x1280x3420 float32"  # as before


@pytest.mark.parametrize("dtype", ["bfloat16", "fp16", "torch.float16"])
def test_tf32_on_a_half_precision_gemm_is_a_problem_error_naming_float32(dtype: str):
    with pytest.raises(ProblemError, match=r"tf32: TF32 applies to float32 GEMMs only, got dtype \w+"):
        Problem(64, 64, 64, dtype, tf32=True)


@pytest.mark.parametrize("bad", ["yes", 1, 0, None, np.bool_(True)])
def test_tf32_takes_a_bool_and_nothing_that_merely_looks_like_one(bad: object):
    with pytest.raises(ProblemError, match="tf32: expected True or False"):
        Problem(64, 64, 64, "float32", tf32=bad)  # type: ignore[arg-type]


# -- Inductor's rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("m", "n", "k", "expected"), [
    (15, 4096, 4096, False), (16, 512, 512, True), (16, 511, 4096, False), (16, 4096, 511, False),
    (4096, 4096, 4096, True), (1, 1280, 3420, False),
    ((16, 8192), 4096, 4096, True), ((2, 8192), 4096, 4096, False), (64, (600, 700), 4096, True),
    (64, (15, 4096), 4096, False),
])
def test_from_torch_2_13_the_sizes_decide_by_their_smallest_value(m, n, k, expected):  # noqa: ANN001
    assert inductor_allow_tf32(m, n, k, fp32_precision="tf32", torch_version="2.13.0") is expected


@pytest.mark.parametrize(("m", "n", "k", "same", "expected"), [
    (1, 1280, 3420, False, True), (7, 13, 9, False, True), ((2, 8192), 17, 33, False, True),
    (560, 1280, 3424, True, True), (560, 1280, 3420, True, False), (560, 1281, 3424, True, False),
    (561, 1280, 3424, True, False), ((16, 16), 1280, 3424, True, True), ((16, 8192), 1280, 3424, True, False),
])
def test_before_torch_2_13_only_force_same_precision_asks_for_alignment(
        m, n, k, same, expected):  # noqa: ANN001
    assert inductor_allow_tf32(m, n, k, fp32_precision="tf32", torch_version="2.11.0",
                               force_same_precision=same) is expected


@pytest.mark.parametrize("precision", ["ieee", "none", "bf16"])
@pytest.mark.parametrize("version", ["2.11.0", "2.13.0"])
def test_without_fp32_precision_tf32_nothing_runs_with_tf32(precision: str, version: str):
    assert not inductor_allow_tf32(4096, 4096, 4096, fp32_precision=precision, torch_version=version)


def test_the_rule_reads_the_running_precision_by_default():
    torch = pytest.importorskip("torch")
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        assert inductor_allow_tf32(4096, 4096, 4096)
        matmul.fp32_precision = "ieee"
        assert not inductor_allow_tf32(4096, 4096, 4096)
    finally:
        matmul.fp32_precision = before


def _inductor_allow_tf32(m, n, k, low_high=None):  # noqa: ANN001, ANN202
    """ALLOW_TF32 from the installed Inductor's mm heuristic (get_extra_kwargs) for these sizes; a
    `low_high` makes M a symbol of that range."""
    import sympy
    from torch._inductor.kernel_inputs import MMKernelInputs
    from torch._inductor.sizevars import SizeVarAllocator
    from torch._inductor.template_heuristics.triton import CUDAMMTemplateConfigHeuristic
    from torch._inductor.virtualized import V
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    from torch._dynamo.source import ConstantSource

    class Inputs(MMKernelInputs):
        def __init__(self, mnk) -> None:  # noqa: ANN001
            self.mnk = mnk

        def mnk_symbolic(self):  # noqa: ANN202
            return self.mnk

    class Graph:
        def __init__(self, env) -> None:  # noqa: ANN001
            self.sizevars = SizeVarAllocator(env)

    env = ShapeEnv()
    if low_high is not None:
        m = env.create_symbol(low_high[0], ConstantSource("s0"), dynamic_dim=DimDynamic.DYNAMIC)
        env.constrain_symbol_range(m, compiler_min=low_high[0], compiler_max=low_high[1])
    else:
        m = sympy.Integer(m)
    with V.set_graph_handler(Graph(env)):
        return CUDAMMTemplateConfigHeuristic().get_extra_kwargs(
            Inputs((m, sympy.Integer(n), sympy.Integer(k))), "mm")["ALLOW_TF32"]


@pytest.mark.parametrize(("m", "n", "k", "symbolic"), [
    (1, 1280, 3420, None), (15, 4096, 4096, None), (16, 512, 512, None), (16, 511, 4096, None),
    (560, 1280, 3420, None), (4096, 64, 4096, None), (8192, 4096, 14336, None),
    (100, 4096, 4096, (2, 8192)), (100, 4096, 4096, (16, 8192)), (100, 4096, 4096, (15, 8192)),
])
def test_the_rule_is_the_installed_inductors(m: int, n: int, k: int, symbolic: tuple[int, int] | None):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._inductor.template_heuristics.triton")
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        for precision in ("tf32", "ieee"):
            matmul.fp32_precision = precision
            ours = inductor_allow_tf32(symbolic or m, n, k)
            assert ours is bool(_inductor_allow_tf32(m, n, k, symbolic)), (precision, torch.__version__)
    finally:
        matmul.fp32_precision = before
    if torch_minor_version() >= (2, 13):  # the sizes decide only from 2.13: show that they did here
        assert inductor_allow_tf32(symbolic or m, n, k, fp32_precision="tf32") is (
            (symbolic or (m,))[0] >= 16 and min(n, k) >= 512)


# -- the model, its card and the decision --------------------------------------------------------------

def test_features_differ_only_in_the_compute_roofline_at_the_tf32_rate():
    configs = for_problem(SEED_FP32, "h100", "exhaustive")[:50]
    from kernel_select.device import get_device

    h100 = get_device("h100")
    ieee = featurize(SEED_FP32, configs, h100)
    tf32 = featurize(Problem(560, 1280, 3420, "float32", layout="nt", tf32=True), configs, h100)
    names = FEATURE_SETS[FEATURE_VERSION]
    differ = {names[i] for i in np.flatnonzero((ieee != tf32).any(axis=0))}
    assert differ == {"log_roofline_compute_ms"}
    column = names.index("log_roofline_compute_ms")
    rate = np.exp(ieee[:, column] - tf32[:, column])
    np.testing.assert_allclose(rate, h100.peak_flops_tf32 / h100.peak_flops_fp32, rtol=1e-5)


def test_the_analytical_model_scores_a_tf32_problem_at_the_tensor_core_rate():
    model = AnalyticalModel("h100")
    configs = for_problem(SEED_FP32, "h100", "exhaustive")
    ieee = model.estimate(SEED_FP32, configs).min()
    tf32 = model.estimate(Problem(560, 1280, 3420, "float32", layout="nt", tf32=True), configs).min()
    assert tf32 < ieee / 3


def test_a_stratum_names_tf32_in_place_of_the_dtype():
    assert stratum("mm", TF32, 560) == "mm/tf32/m<=4096"
    assert stratum("baddbmm", "float32", 8) == "bmm/float32/m<=16"


DOMAIN = Domain(strata={"mm/float32/m<=4096": 400}, m=(1, 65536), n=(16, 65536), k=(16, 65536))


def test_a_card_without_tf32_strata_puts_a_tf32_problem_outside_its_domain():
    tf32 = Problem(560, 1280, 3420, "float32", tf32=True)
    assert outside_domain(Problem(560, 1280, 3420, "float32"), ["float32"], DOMAIN) == ""
    assert "TF32" in outside_domain(tf32, ["float32"], DOMAIN)
    assert "TF32" in outside_domain(tf32, ["float32"], None)  # a card from before the domain
    with_tf32 = Domain(strata={**DOMAIN.strata, "mm/tf32/m<=4096": 25}, m=DOMAIN.m, n=DOMAIN.n, k=DOMAIN.k)
    assert outside_domain(tf32, ["float32"], with_tf32) == ""  # a card that lists TF32: like any problem
    assert "mm/tf32/m<=256" in outside_domain(Problem(64, 1280, 3420, "float32", tf32=True), ["float32"],
                                               with_tf32)


def test_the_shipped_model_treats_a_tf32_gemm_as_outside_and_makes_no_cublas_decision():
    from kernel_select import runtime

    model = runtime.model(None, "h100")
    from tests.inductor_doubles import FakeGate

    tf32 = select(Problem(560, 1280, 3420, "float32", layout="nt", tf32=True), model=model, gemm_topk=4,
                  gate=FakeGate(0.1), cublas_margin=0.15)
    assert "TF32" in tf32.outside and tf32.cublas is None and len(tf32.choices) == 4
    assert "TF32" in tf32.summary()
    ieee = select(SEED_FP32, model=model, gemm_topk=4)
    assert ieee.outside == ""


def test_the_api_and_the_pruner_take_the_flag_with_one_error_for_another_dtype():
    model = FakeModel()
    chosen = api.top_k(560, 1280, 3420, "float32", gemm_topk=2, model=model, tf32=True)
    assert len(chosen) == 2
    assert api.estimate(560, 1280, 3420, "float32", [chosen[0].config], model=AnalyticalModel("h100"),
                        tf32=True)[0] < api.estimate(560, 1280, 3420, "float32", [chosen[0].config],
                                                     model=AnalyticalModel("h100"))[0]
    with pytest.raises(ProblemError, match="tf32: TF32 applies to float32 GEMMs only"):
        api.top_k(560, 1280, 3420, "bfloat16", model=model, tf32=True)
    with pytest.raises(OptionError, match=r"triton_pruner\(tf32=True\): TF32 applies to float32"):
        triton_pruner(dtype="bf16", tf32=True)
    with pytest.raises(OptionError, match=r"triton_pruner\(tf32=...\): expected True or False"):
        triton_pruner(tf32="yes")
    assert triton_pruner(dtype="fp32", tf32=True)["early_config_prune"].tf32 is True
