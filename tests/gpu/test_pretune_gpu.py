"""pretune and record on a GPU with a tiny model: the pinned LUT serves one graph per length bucket
with no autotuning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def tiny_factory():  # noqa: ANN201
    module = torch.nn.Linear(256, 128, bias=False).cuda().to(torch.bfloat16)
    x = torch.randn(192, 256, device="cuda", dtype=torch.bfloat16)
    return module, (x,), {0: (0, 64, 1024)}


def test_pretune_from_the_compiled_graph_pins_what_two_buckets_serve_without_benchmarks(tmp_path: Path):
    import kernel_select.inductor as ks_inductor
    from kernel_select import runtime
    from kernel_select.lut import load_lut
    from kernel_select.offline.serving import discovery, pretune

    device = runtime.current_device()
    module, inputs, dynamic = tiny_factory()
    with torch.no_grad():
        sites = discovery.discover_compiled(module, inputs, dynamic)
    assert [(s.dynamic, s.low, s.high, s.layout) for s in sites] == [("m", 64, 1024, "nt")]
    out = tmp_path / "tiny.json"
    summary = pretune.pretune(sites, out=out, device=device, model=runtime.model(None, device), k=2, points=3,
                              refine=1, progress=False)
    lut = load_lut(out)
    buckets = summary["sites"][0]["buckets"]
    assert buckets[0]["lengths"][0] == 64 and buckets[-1]["lengths"][1] == 1024  # the whole range, pinned
    assert summary["gemm_dynamic_buckets"][0] == 64 and summary["gemm_dynamic_buckets"][-1] == 1025
    assert lut.bucket_edges(device) == tuple(summary["gemm_dynamic_buckets"])

    # Serve two buckets (whatever pretune found: a LUT of one bucket pins both graphs the same).
    with ks_inductor.enabled(kernel_lut_path=str(out), gemm_dynamic_buckets="64,300,1025"), \
            ks_inductor.record_autotuning() as records, torch.no_grad(), \
            torch.compiler.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        compiled = torch.compile(module, options=ks_inductor.gemm_autotune_options(cudagraphs=False,
                                                                                    shape_padding=False))
        serve = ks_inductor.bucketed(compiled, {0: 0})
        for length in (100, 200, 500, 1000):
            x = torch.randn(length, 256, device="cuda", dtype=torch.bfloat16)
            torch.testing.assert_close(serve(x), module(x), atol=1e-1, rtol=1e-2)
    assert {str(b) for b in serve.seen} == {"64..299", "300..1024"}
    assert records == []  # one choice per GEMM in each graph: Inductor benchmarked nothing


def test_record_writes_the_autotuned_gemms(tmp_path: Path):
    import kernel_select

    module, (x,), _ = tiny_factory()
    out = tmp_path / "recorded.json"
    with kernel_select.record(out) as recording:
        torch._dynamo.reset()
        torch.compile(module, mode="max-autotune-no-cudagraphs")(x)
    assert recording.feedback and recording.lut is not None and recording.lut.num_entries >= 1
