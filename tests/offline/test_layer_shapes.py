"""Real layer GEMMs in their served layouts: the architecture table's layouts, pretune's agreement,
the layer plan's groups, `kernel-select shapes --layers`, and the coverage plan left unchanged."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernel_select.cli.main import main
from kernel_select.errors import ProblemError
from kernel_select.offline.data import architectures, dataset, problem_ids, shapes
from kernel_select.offline.data.plans import sampler
from kernel_select.offline.data.architectures import IN_OUT, OUT_IN, Architecture, layer_gemms
from tests.offline.test_bench_plan import _rows

ROOT = Path(__file__).resolve().parents[2]
#: sha256 of `shapes.save(coverage_shapes(4000, seed=0))` before layouts came in: the coverage
#: sampler's problems must not move when the layer plan changes.
COVERAGE_4000_SHA256 = "24577da5828bbeaf5b8f111ccdf445754664ac9d86310c96d28c9b9c07bc10f4"
#: sha256 of data/shapes_coverage.json, the measured plan (bead81d): its problem ids are in datasets.
COMMITTED_COVERAGE_SHA256 = "ed96ef4267f586c46abe3ed86b76faf210c01b623f53ad8fa6262ba52a9c63be"


def _by_gemm(arch: Architecture, regime: str = "train") -> dict[str, tuple[int, int, int, str]]:
    """The first token count's GEMMs of each kind: {"fwd": (m, n, k, layout), ...}."""
    out: dict[str, tuple[int, int, int, str]] = {}
    for g in layer_gemms(arch):
        if g.regime == regime:
            out.setdefault(g.layer.split()[-1], (g.m, g.n, g.k, g.layout))
    return out


def test_linear_and_conv1d_weights_give_their_layouts_and_sizes():
    gpt2_xl = next(a for a in architectures.ARCHITECTURES if a.name == "gpt2-xl")
    vit = next(a for a in architectures.ARCHITECTURES if a.name == "vit-l14")
    assert (gpt2_xl.weights, vit.weights) == (IN_OUT, OUT_IN)
    t = architectures.TOKENS["vision"]["train"][0]  # vit-l14 fc1: Linear(1024 -> 4096)
    assert _by_gemm(Architecture("fc1", "vision", (("fc1", 1024, 4096),))) == {
        "fwd": (t, 4096, 1024, "nt"), "dX": (t, 1024, 4096, "nn"), "dW": (4096, 1024, t, "tn")}
    t = architectures.TOKENS["decoder-llm"]["train"][0]  # gpt2-xl c_attn: Conv1D(1600 -> 4800)
    assert _by_gemm(Architecture("qkv", "decoder-llm", gpt2_xl.layers[:1], IN_OUT)) == {
        "fwd": (t, 4800, 1600, "nn"), "dX": (t, 1600, 4800, "nt"), "dW": (1600, 4800, t, "tn")}
    assert {g.layout for g in layer_gemms(vit) if g.regime != "train"} == {"nt"}  # inference: forward only


@pytest.mark.parametrize("weights", [OUT_IN, IN_OUT])
def test_layer_gemms_agree_with_what_pretune_discovers(weights, monkeypatch):
    from kernel_select.offline.serving import discovery

    torch.manual_seed(0)
    monkeypatch.setitem(architectures.TOKENS, "decoder-llm", {"train": (48,)})
    toy = Architecture("toy", "decoder-llm", (("proj", 64, 32),), weights)
    stored = (32, 64) if weights == OUT_IN else (64, 32)
    weight, bias = torch.nn.Parameter(torch.randn(*stored)), torch.nn.Parameter(torch.randn(32))

    def layer(x: torch.Tensor) -> torch.Tensor:  # nn.Linear's F.linear, or GPT-2 Conv1D's addmm
        if weights == OUT_IN:
            return torch.nn.functional.linear(x, weight, bias)
        return torch.addmm(bias, x, weight)

    sites = discovery.discover(layer, (torch.randn(48, 64, requires_grad=True),), {0: (0, 16, 4096)},
                             backward=True)
    discovered = {(s.problem.m, s.problem.n, s.problem.k, s.layout) for s in sites}
    assert discovered == {(g.m, g.n, g.k, g.layout) for g in layer_gemms(toy)}


def test_output_heads_are_the_language_models_and_planned_apart_from_their_layers():
    by_name = {a.name: a for a in architectures.ARCHITECTURES}
    assert all(a.head for a in by_name.values() if a.kind in ("decoder-llm", "moe"))
    assert not any(g.layer.startswith("lm_head") for g in architectures.all_layer_gemms())
    t = architectures.TOKENS["decoder-llm"]["train"][0]
    heads: dict[str, tuple[int, int, int, str]] = {}
    for g in architectures.head_gemms(by_name["llama3-8b"]):
        if g.regime == "train":  # the first training size's
            heads.setdefault(g.layer.split()[-1], (g.m, g.n, g.k, g.layout))
    assert heads == {"fwd": (t, 128256, 4096, "nt"), "dX": (t, 4096, 128256, "nn"),
                     "dW": (128256, 4096, t, "tn")}
    # GPT-2's blocks are Conv1D (in, out), but its head is the (vocabulary, hidden) embedding, tied.
    assert {(g.n, g.k, g.layout) for g in architectures.head_gemms(by_name["gpt2"]) if g.regime == "decode"} \
        == {(50257, 768, "nt")}
    assert architectures.head_gemms(by_name["vit-b16"]) == []


def test_shapes_layers_heads_writes_the_heads_alone(tmp_path):
    out = tmp_path / "heads.json"
    assert main(["shapes", "--layers", "--heads", "--dtype", "fp16", "--out", str(out)]) == 0
    heads = shapes.load(out)
    vocabularies = {a.head[1] for a in architectures.ARCHITECTURES if a.head}
    assert heads and {s.layer for s in heads} == {"lm_head fwd"} and {s.n for s in heads} <= vocabularies
    assert all(2.0 * s.m * s.n * s.k <= 1e11 for s in heads)  # the --layers cap
    with pytest.raises(SystemExit) as exit_:
        main(["shapes", "--heads", "--out", str(out)])
    assert exit_.value.code == 2


@pytest.fixture(scope="module")
def plan() -> list[shapes.Shape]:
    return sampler.layer_shapes(600, seed=3)


def test_the_layer_plan_never_mixes_layouts_in_a_group(plan):
    assert len(plan) == 600 and [s.dtype for s in plan] == ["bfloat16"] * 300 + ["float16"] * 300
    assert {s.layout for s in plan} == {"nt", "nn", "tn"}
    for group, members in itertools.groupby(plan, key=lambda s: s.group):
        members = list(members)
        assert len({s.layout for s in members}) == 1, group
        if not group.endswith("/mixed"):
            assert {sampler.shape_class(s) for s in members} == {group}
    assert all(2.0 * s.m * s.n * s.k <= 1e11 for s in plan)


def test_every_compile_class_keeps_its_share_of_a_capped_plan():
    full = sampler.layer_shapes(dtypes=("bfloat16",))
    capped = sampler.layer_shapes(len(full) // 2, dtypes=("bfloat16",))
    full_classes = {s.group for s in full}
    assert {s.group for s in capped} == full_classes  # thinning keeps every class
    assert len({s.family for s in capped}) == len({s.family for s in full})


def test_a_transposed_a_puts_m_in_the_compile_class():
    assert sampler.compile_class("bfloat16", 4096, 4096) == "bfloat16/n16/k16/r0"  # "nn" names unchanged
    assert sampler.compile_class("bfloat16", 4096, 4096, "nt") == "bfloat16/n16/k16/r0/nt"
    assert sampler.compile_class("bfloat16", 4096, 4096, "tn", 1000) == "bfloat16/n16/k16/r0/tn/m8"
    with pytest.raises(ProblemError, match="needs M"):
        sampler.compile_class("bfloat16", 4096, 4096, "tn")


def test_shapes_layers_writes_a_file_bench_reads_and_skips_measured_problems(tmp_path, capsys):
    served_nn = next(s for s in sampler.layer_shapes(dtypes=("bfloat16",)) if s.layout == "nn")
    measured = tmp_path / "measured.parquet"
    pid = problem_ids.problem_id(served_nn.m, served_nn.n, served_nn.k, "bfloat16")
    dataset.write(_rows(pid, [1.0]), measured)
    out = tmp_path / "layers.json"
    args = ["shapes", "--layers", "--dtype", "bf16", "--measured", str(measured), "--out", str(out)]
    assert main(args) == 0
    loaded = shapes.load(out)  # what `kernel-select bench --shapes` reads
    keys = {(s.m, s.n, s.k, s.layout) for s in loaded}
    assert (served_nn.m, served_nn.n, served_nn.k, "nn") not in keys
    assert len(loaded) == len(sampler.layer_shapes(dtypes=("bfloat16",))) - 1
    assert {s.layout for s in loaded} == {"nt", "nn", "tn"} and {s.dtype for s in loaded} == {"bfloat16"}
    assert "layout nt" in capsys.readouterr().out


def test_the_coverage_plan_does_not_move(tmp_path):
    path = tmp_path / "coverage.json"
    shapes.save(sampler.coverage_shapes(4000, seed=0), path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == COVERAGE_4000_SHA256
    committed = ROOT / "data" / "shapes_coverage.json"
    assert hashlib.sha256(committed.read_bytes()).hexdigest() == COMMITTED_COVERAGE_SHA256
    assert {s.layout for s in shapes.load(committed)} == {"nn"}


def test_the_committed_layer_plan_holds_served_layer_problems_in_one_layout_per_group():
    committed = shapes.load(ROOT / "data" / "shapes_layers_h100.json")
    assert len(committed) == 1000 and [s.dtype for s in committed] == ["bfloat16"] * 500 + ["float16"] * 500
    served = {(s.m, s.n, s.k, s.dtype, s.layout) for s in sampler.layer_shapes()}
    assert {(s.m, s.n, s.k, s.dtype, s.layout) for s in committed} <= served
    groups = itertools.groupby(committed, key=lambda s: s.group)
    assert all(len({s.layout for s in members}) == 1 for _, members in groups)


def test_the_committed_heads_plan_is_what_shapes_layers_heads_writes():
    committed = shapes.load(ROOT / "data" / "shapes_heads.json")
    assert committed == sampler.layer_shapes(dtypes=("bfloat16", "float16", "float32"), source="heads")
    assert len(committed) == 255  # data/README.md describes these


def test_lora_adapters_are_two_linear_layers_of_rank_r_beside_each_layer():
    t = architectures.TOKENS["decoder-llm"]["train"][0]
    # whatever the layer's own weight storage, an adapter's two layers are nn.Linear (out, in)
    toy = Architecture("toy", "decoder-llm", (("q_proj", 4096, 2048),), IN_OUT)
    by_layer: dict[str, tuple[int, int, int, str]] = {}
    for g in architectures.lora_gemms(toy, ranks=(8,)):
        if g.regime == "train":
            by_layer.setdefault(g.layer, (g.m, g.n, g.k, g.layout))
    assert by_layer == {
        "q_proj lora_A r8 fwd": (t, 8, 4096, "nt"), "q_proj lora_A r8 dX": (t, 4096, 8, "nn"),
        "q_proj lora_A r8 dW": (8, 4096, t, "tn"),  # M = r: the tn GEMM no layer has
        "q_proj lora_B r8 fwd": (t, 2048, 8, "nt"), "q_proj lora_B r8 dX": (t, 8, 2048, "nn"),
        "q_proj lora_B r8 dW": (2048, 8, t, "tn")}
    ranks = {int(g.layer.split()[2][1:]) for g in architectures.all_lora_gemms()}
    assert ranks == set(architectures.LORA_RANKS)
    assert not any("lora" in g.layer for g in architectures.all_layer_gemms())  # planned apart


def test_the_committed_lora_plan_is_what_shapes_layers_lora_writes(tmp_path):
    committed = shapes.load(ROOT / "data" / "shapes_lora.json")
    assert committed == sampler.layer_shapes(480, source="lora")
    assert len(committed) == 480 and {s.layout for s in committed} == {"nt", "nn", "tn"}
    assert min(s.m for s in committed if s.layout == "tn") == 8  # the small-M weight gradients
    out = tmp_path / "lora.json"
    assert main(["shapes", "--layers", "--lora", "--max-problems", "480", "--out", str(out)]) == 0
    assert shapes.load(out) == committed
    for option in (["--lora"], ["--layers", "--lora", "--heads"]):
        with pytest.raises(SystemExit) as exit_:
            main(["shapes", *option, "--out", str(tmp_path / "x.json")])
        assert exit_.value.code == 2
    with pytest.raises(ProblemError, match="served layouts only"):
        sampler.layer_groups("bfloat16", 1e11, source="lora")


def test_a_work_floor_keeps_the_large_layer_gemms_and_only_them():
    floor, cap = 1e11, 1.1e12
    big = sampler.layer_shapes(dtypes=("bfloat16", "float32"), min_flop=floor, max_flop=cap)
    work = {d: [2.0 * s.m * s.n * s.k for s in big if s.dtype == d] for d in ("bfloat16", "float32")}
    assert work["bfloat16"] and min(work["bfloat16"]) >= floor and max(work["bfloat16"]) <= cap
    assert all(min(w) >= floor * sampler.FLOP_SCALE[d] for d, w in work.items())  # scaled as the cap
    everything = sampler.layer_shapes(dtypes=("bfloat16",), max_flop=cap)
    expected = {(s.m, s.n, s.k, s.layout) for s in everything if 2.0 * s.m * s.n * s.k >= floor}
    assert {(s.m, s.n, s.k, s.layout) for s in big if s.dtype == "bfloat16"} == expected
    for bad in (cap, 2 * cap, -1.0, float("nan")):
        with pytest.raises(ProblemError, match="work floor"):
            sampler.layer_shapes(dtypes=("bfloat16",), min_flop=bad, max_flop=cap)


@pytest.mark.parametrize("option", [["--min-flop", "1e11"], ["--eight-mod-16"]])
def test_the_layer_plan_options_need_layers(tmp_path, option):
    with pytest.raises(SystemExit) as exit_:
        main(["shapes", *option, "--out", str(tmp_path / "x.json")])
    assert exit_.value.code == 2


def test_the_committed_prefill_plan_is_the_large_layer_gemms():
    committed = shapes.load(ROOT / "data" / "shapes_prefill_big.json")
    planned = {(s.m, s.n, s.k, s.layout) for s in sampler.layer_shapes(
        dtypes=("bfloat16",), min_flop=1e11, max_flop=1.1e12)}
    assert len(committed) == 290 and {(s.m, s.n, s.k, s.layout) for s in committed} <= planned


def test_eight_mod_16_variants_move_n_then_k_and_keep_the_rest():
    g = architectures.LayerGemm(m=2048, n=4096, k=11008, family="llama2-7b", layer="up fwd", regime="prefill",
                                layout="nt")
    wide, deep = sampler.eight_mod_16_variants([g])
    assert (wide.m, wide.n, wide.k, wide.layout) == (2048, 4104, 11008, "nt")
    assert wide.layer == "up fwd N 8 mod 16"
    assert (deep.n, deep.k) == (4096, 11016) and deep.family == "llama2-7b"
    assert sampler.width_8_mod_16(50257) == 50264  # what pad_mm makes of GPT-2's vocabulary
    already = replace(g, n=4104)
    assert [(v.n, v.k) for v in sampler.eight_mod_16_variants([already])] == [(4104, 11016)]


def test_the_committed_eight_mod_16_plan_is_what_shapes_writes(tmp_path):
    out = tmp_path / "plan.json"
    args = ["shapes", "--layers", "--eight-mod-16", "--dtype", "bf16", "--min-flop", "1e10", "--max-flop",
            "1.1e12", "--max-problems", "240", "--out", str(out)]
    assert main(args) == 0
    committed = ROOT / "data" / "shapes_eight_mod_16.json"
    assert out.read_bytes() == committed.read_bytes()
    plan = shapes.load(committed)
    assert all(s.n % 16 == 8 or s.k % 16 == 8 for s in plan)
    assert {s.layout for s in plan} == {"nt", "nn", "tn"}
