"""pretune's discovery from the compiled graph (CPU, real torch.compile): the GEMMs Inductor
lowers, their epilogues, and the size that follows the length."""

from __future__ import annotations

import torch

from kernel_select.model.cublas import Epilogue
from kernel_select.offline.serving import discovery


def test_the_compiled_graph_shows_epilogues_layouts_and_the_dynamic_size_of_every_gemm():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)

    def model(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(linear(x)) * 2  # a pointwise chain a Triton template would fuse

    x = torch.randn(48, 64, requires_grad=True)
    sites = discovery.discover_compiled(model, (x,), {0: (0, 16, 4096)}, backward=True)
    by_layout = {site.layout: site for site in sites}
    assert sorted(by_layout) == ["nn", "nt", "tn"] and len(sites) == 3
    forward, grad_input, grad_weight = by_layout["nt"], by_layout["nn"], by_layout["tn"]
    assert forward.problem.op == "addmm"
    assert forward.epilogue == Epilogue(bias_row=True, separate_pointwise=True)
    assert (forward.dynamic, forward.low, forward.high, forward.per_length) == ("m", 16, 4096, 1)
    assert (grad_input.dynamic, grad_input.problem.n, grad_input.problem.k) == ("m", 64, 32)
    assert (grad_weight.dynamic, grad_weight.low, grad_weight.high) == ("k", 16, 4096)
    assert grad_weight.epilogue == Epilogue()  # eager discovery knows no epilogue: None there
    assert discovery.discover(model, (x,), {0: (0, 16, 4096)})[0].epilogue is None


def test_a_batch_of_sequences_makes_m_a_multiple_of_the_length_and_inference_lowers_no_backward():
    linear = torch.nn.Linear(64, 32, bias=False)
    x = torch.randn(2, 48, 64)
    (site,) = discovery.discover_compiled(linear, (x,), {0: (1, 16, 4096)})
    assert (site.dynamic, site.low, site.high, site.per_length) == ("m", 32, 8192, 2)
    assert site.lengths() == (16, 4096) and site.at(200).m == 200


def test_lowerings_a_lut_entry_cannot_tell_apart_share_one_site_with_their_epilogues_merged():
    from kernel_select.problem import Problem

    projection = Problem(2048, 4096, 4096, layout="nt")
    query = discovery.Site(projection, "m", 128, 8192, "nt", Epilogue())
    output = discovery.Site(projection, "m", 128, 8192, "nt", Epilogue(separate_pointwise=True))
    other = discovery.Site(Problem(2048, 1024, 4096, layout="nt"), "m", 128, 8192, "nt", Epilogue())
    merged = discovery.merge_epilogues([query, other, output])
    fused = Epilogue(separate_pointwise=True)
    assert merged == [discovery.Site(projection, "m", 128, 8192, "nt", fused), other]


def test_the_decoder_layer_lowers_four_gemms_its_projections_sharing_them(monkeypatch):  # noqa: ANN001
    from kernel_select.offline.serving import programs

    for name, value in {"HIDDEN": 64, "HEADS": 4, "KV_HEADS": 2, "HEAD_DIM": 16, "MLP": 128}.items():
        monkeypatch.setattr(programs, name, value)  # the serving program's layer, narrow for a CPU
    layer = programs.DecoderLayer().eval()
    sites = discovery.discover_compiled(layer, (torch.randn(1, 48, 64),), {0: (1, 8, 512)})
    found = {(s.problem.n, s.problem.k): s.epilogue for s in sites}
    # q and o (64 x 64), k and v (32 x 64), gate and up (128 x 64, SiLU x up fused after them), down
    assert set(found) == {(64, 64), (32, 64), (128, 64), (64, 128)}
    assert found[(128, 64)].separate_pointwise and not found[(32, 64)].separate_pointwise
    assert {(s.dynamic, s.low, s.high, s.layout) for s in sites} == {("m", 8, 512, "nt")}


def test_an_example_length_outside_its_range_is_refused_before_compiling():
    import pytest

    from kernel_select.errors import KernelSelectError

    with pytest.raises(KernelSelectError, match=r"example input 0 has length 48 in dimension 0, outside its "
                                                r"range 64\.\.4096"):
        discovery.discover_compiled(torch.nn.Linear(8, 4), (torch.randn(48, 8),), {0: (0, 64, 4096)})
