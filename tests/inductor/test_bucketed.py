"""One compiled graph per length bucket (kernel_select.inductor.bucketed), on the CPU with real
Dynamo: each bucket compiles once and declares its bounds, later lengths reuse their bucket's graph."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kernel_select.inductor as ks_inductor
from kernel_select.buckets import Bucket
from kernel_select.errors import KernelSelectError
from kernel_select.inductor import inputs as inductor_inputs
from kernel_select.lut import LUTEntry, SizeRange, lut_from_rows, save_lut


def test_each_bucket_compiles_one_graph_over_its_bounds_at_its_middle(monkeypatch: pytest.MonkeyPatch):
    seen = []  # (hinted M, declared ranges) of each GEMM the handler is asked about
    original = ks_inductor.KernelSelectChoices._replace

    def spy(self, choices, kernel_inputs, op_name, overrides):  # noqa: ANN001, ANN202
        request = inductor_inputs.request_from(kernel_inputs, op_name)
        seen.append((kernel_inputs.mnk_hinted()[0], request.served))
        return original(self, choices, kernel_inputs, op_name, overrides)

    monkeypatch.setattr(ks_inductor.KernelSelectChoices, "_replace", spy)
    weight = torch.randn(32, 48)
    with ks_inductor.enabled(gemm_topk=2, gemm_device="h100", gemm_dynamic_buckets="64,128,512"), \
            torch.compiler.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        serve = ks_inductor.bucketed(torch.compile(lambda x: x @ weight), {0: 0})
        for length in (40, 100, 70, 300, 1000, 5000, 90, 2):
            x = torch.randn(length, 32)
            torch.testing.assert_close(serve(x), x @ weight)
    assert serve.edges == (64, 128, 512)
    assert serve.seen == {Bucket(2, 63), Bucket(64, 127), Bucket(128, 511), Bucket(512, None)}
    # One graph per bucket, in the order first served: the first bucket at the first length it saw,
    # bounded buckets at their middle, the last at its first length with no bound (none declared).
    assert seen == [(40, {"m": (2, 63)}), (90, {"m": (64, 127)}), (256, {"m": (128, 511)}), (1000, {})]


def test_edges_come_from_the_knob_else_the_lut_else_one_graph(tmp_path: Path):
    path = tmp_path / "pins.json"
    config = {"block_m": 64, "block_n": 64, "block_k": 32, "num_stages": 3, "num_warps": 4}
    save_lut(lut_from_rows([("h100", "mm", "bfloat16", LUTEntry(m=SizeRange(min=560, max=1810), n=64, k=64,
                                                                pin=config)),
                            ("h100", "mm", "bfloat16", LUTEntry(m=SizeRange(min=1811, max=8192), n=64, k=64,
                                                                pin="aten"))]), path)
    with ks_inductor.enabled(kernel_lut_path=str(path), gemm_device="h100"):
        assert ks_inductor.bucketed(torch.nn.Identity(), {0: 0}).edges == (560, 1811, 8193)
        with ks_inductor.enabled(kernel_lut_path=str(path), gemm_device="h100", gemm_dynamic_buckets="1024"):
            assert ks_inductor.bucketed(torch.nn.Identity(), {0: 0}).edges == (1024,)
    with ks_inductor.enabled(gemm_device="h100"):
        assert ks_inductor.bucketed(torch.nn.Identity(), {0: 0}).edges == ()
    assert ks_inductor.bucketed(torch.nn.Identity(), {0: 0}, edges=(4096, 1024)).edges == (1024, 4096)


def test_marking_keeps_one_range_per_dimension_and_leaves_zero_one_and_single_lengths_static():
    x = torch.randn(100, 8)
    torch._dynamo.mark_dynamic(x, 0)  # marked by the caller before: its range is replaced, not added to
    assert ks_inductor.mark_bucket(x, 0, (64, 128)) == Bucket(64, 127)
    assert [(r.dim, r.min, r.max) for r in x._dynamo_dynamic_range] == [(0, 64, 127)]
    one = torch.randn(1, 8)
    assert ks_inductor.mark_bucket(one, 0, (64,)) is None and not hasattr(one, "_dynamo_dynamic_indices")
    single = torch.randn(64, 8)
    assert ks_inductor.mark_bucket(single, 0, (64, 65)) == Bucket(64, 64)
    assert not hasattr(single, "_dynamo_dynamic_indices")  # Dynamo refuses a range of one value


def test_a_range_tracing_guards_inside_is_reported_with_the_fix():
    class ConstraintViolationError(RuntimeError):
        pass

    def compiled(x: torch.Tensor) -> torch.Tensor:
        try:
            raise ConstraintViolationError("Not all values of s0 in [1024, 2047] satisfy the guard s0 < 1280")
        except ConstraintViolationError as exc:
            raise RuntimeError("wrapped by Dynamo") from exc

    serve = ks_inductor.bucketed(compiled, {0: 0}, edges=(1024, 2048))
    with pytest.raises(KernelSelectError, match=r"guards the length inside one of the buckets .*"
                                                r"compile with shape_padding=False"):
        serve(torch.randn(1500, 8))
    with pytest.raises(KernelSelectError, match="name at least one argument"):
        ks_inductor.bucketed(compiled, {})
