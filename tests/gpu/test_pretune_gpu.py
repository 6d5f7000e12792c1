"""pretune and record on a GPU with a tiny model: the pinned LUT serves a compile with no autotuning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def tiny_factory():  # noqa: ANN201
    module = torch.nn.Linear(256, 128, bias=False).cuda().to(torch.bfloat16)
    x = torch.randn(192, 256, device="cuda", dtype=torch.bfloat16)
    return module, (x,), {0: (0, 64, 1024)}


def test_pretune_writes_pins_that_serve_without_benchmarks(tmp_path: Path):
    import kernel_select.inductor as ks_inductor
    from kernel_select import runtime
    from kernel_select.offline.serving import pretune

    device = runtime.current_device()
    module, inputs, dynamic = tiny_factory()
    sites = pretune.discover(module, inputs, dynamic)
    out = tmp_path / "tiny.json"
    summary = pretune.pretune(sites, out=out, device=device, model=runtime.model(None, device), k=2, points=2,
                              progress=False)
    assert summary["entries"] == 1 and summary["sites"][0]["dynamic"] == "m"

    x = inputs[0]
    torch._dynamo.mark_dynamic(x, 0, min=64, max=1024)
    with ks_inductor.enabled(kernel_lut_path=str(out)), ks_inductor.record_autotuning() as records, \
            torch.compiler.config.patch(force_disable_caches=True), torch.no_grad():
        # Inference only: with grad enabled, the weight's backward GEMM (dynamic K, not discovered
        # without --backward) would be autotuned too.
        torch._dynamo.reset()
        compiled = torch.compile(module, mode="max-autotune-no-cudagraphs")
        torch.testing.assert_close(compiled(x), module(x), atol=1e-1, rtol=1e-2)
    assert records == []  # one choice: Inductor benchmarked nothing


def test_record_writes_the_autotuned_gemms(tmp_path: Path):
    import kernel_select

    module, (x,), _ = tiny_factory()
    out = tmp_path / "recorded.json"
    with kernel_select.record(out) as recording:
        torch._dynamo.reset()
        torch.compile(module, mode="max-autotune-no-cudagraphs")(x)
    assert recording.feedback and recording.lut is not None and recording.lut.num_entries >= 1
