"""Every workload of the model zoo builds tiny (same builders, narrow widths) and runs a step on
the CPU, eagerly and through Dynamo; transformers architectures skip without transformers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernel_select.errors import OptionError
from kernel_select.offline.e2e import model_zoo
from kernel_select.offline.e2e.model_methods import ModelMethod
from kernel_select.offline.e2e.model_worker import measure


def _needs_transformers(name: str) -> None:
    if model_zoo.ARCHITECTURES[name.split("/")[0]].kind != "recsys":
        pytest.importorskip("transformers")


@pytest.mark.parametrize("name", model_zoo.workload_names())
def test_tiny_workload_runs_a_step(name: str) -> None:
    _needs_transformers(name)
    workload = model_zoo.build_workload(name, device="cpu", tiny=True)
    before = [p.detach().clone() for p in workload.module.parameters()][:2]
    out = workload.make_step(workload.module)()
    assert torch.isfinite(out.float()).all()
    if workload.phase == "train":
        assert out.dim() == 0  # the loss
        assert any(not torch.equal(a, b) for a, b in zip(before, list(workload.module.parameters())[:2]))
    elif workload.architecture != "recsys-mlp":
        assert out.shape[0] == workload.sizes["batch"]


def test_workload_selection() -> None:
    assert model_zoo.parse_workloads("gpt2-small") == ["gpt2-small/prefill", "gpt2-small/decode",
                                                       "gpt2-small/train"]
    assert model_zoo.parse_workloads("vit-b16/decode,vit-b16") == ["vit-b16/decode", "vit-b16/prefill"]
    assert "vit-b16/train" not in model_zoo.workload_names()
    with pytest.raises(OptionError, match="unknown model"):
        model_zoo.parse_workloads("resnet")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama3-8b-2layer/decode", "gpt2-small/train",
                                  "bert-base-2layer-fp32/prefill", "t5-base-2layer/prefill",
                                  "convnext-tiny-2stage/prefill", "swin-tiny-4stage/prefill",
                                  "whisper-medium-encoder-2layer/prefill", "qwen3-moe-2layer/prefill"])
def test_measure_through_dynamo_with_a_fake_timer(name: str) -> None:
    """The worker's path in-process: compile (Dynamo only), record, time step and eager."""
    _needs_transformers(name)
    method = ModelMethod("dynamo", "default", backend="eager")
    result = measure({"model": name, "method": dataclasses.asdict(method), "device": "cpu", "tiny": True,
                      "samples": 2, "min_sample_ms": 1.0},
                     timer=lambda step, repeats: (step(), 3.0 * repeats)[1])
    assert result["compile_s"] > 0 and result["step_ms"] == 3.0 and result["eager_step_ms"] == 3.0
    assert result["gemms"] == []  # Dynamo alone autotunes nothing


def test_vit_attention_gets_no_mask_without_padding() -> None:
    """The zoo's ViT computes what transformers' own SDPA attention does, but builds no all-True
    mask, eagerly or under Dynamo (a mask sends compiled SDPA to its slow math path)."""
    pytest.importorskip("transformers")
    from transformers.masking_utils import create_bidirectional_mask

    model = model_zoo.vit_b16(tiny=True).eval()
    assert model.config._attn_implementation == model_zoo.UNMASKED_SDPA
    pixels = torch.randn(2, 3, 32, 32)
    plain = model_zoo.vit_b16(tiny=True).eval()
    plain.load_state_dict(model.state_dict())
    plain.set_attn_implementation("sdpa")
    with torch.no_grad():
        torch.testing.assert_close(model(pixel_values=pixels).logits, plain(pixel_values=pixels).logits)

    embeds = torch.randn(2, 5, 64)
    assert create_bidirectional_mask(config=model.config, inputs_embeds=embeds, attention_mask=None) is None
    padding = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    masked = create_bidirectional_mask(config=model.config, inputs_embeds=embeds, attention_mask=padding)
    assert masked is not None and not bool(masked.all())  # real padding is still masked

    masks = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        masks.extend(n.kwargs.get("attn_mask", "absent") for n in gm.graph.nodes
                     if n.target is torch._C._nn.scaled_dot_product_attention)
        return gm

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(pixel_values=pixels)
    assert masks and all(mask is None for mask in masks)


def test_vit_builds_on_a_transformers_without_mask_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Older transformers (no masking_utils) build no mask for ViT anyway: the zoo keeps their default."""
    pytest.importorskip("transformers")
    import sys

    import transformers.models.vit.modeling_vit  # noqa: F401 -- loaded before the module is hidden

    monkeypatch.setitem(sys.modules, "transformers.masking_utils", None)  # import fails as on < 4.53
    assert model_zoo.unmasked_sdpa() is None
    assert model_zoo.vit_b16(tiny=True).config._attn_implementation != model_zoo.UNMASKED_SDPA


def _gemms(name: str, device: str = "cpu", tiny: bool = True) -> list[tuple[str, int, int, int, int, str]]:
    """The distinct GEMMs one eager step of workload `name` runs: (op, batch, M, N, K, dtype)."""
    from kernel_select.offline.e2e.model_pretune import discover_sites

    sites = discover_sites(model_zoo.build_workload(name, device=device, tiny=tiny))
    return [(s.problem.op, s.problem.batch, s.problem.m, s.problem.n, s.problem.k, s.problem.dtype)
            for s in sites]


@pytest.mark.parametrize("name", ["bert-base-2layer/prefill", "t5-base-2layer/prefill"])
def test_encoders_run_eager_attention_as_batched_matmuls(name: str) -> None:
    _needs_transformers(name)
    workload = model_zoo.build_workload(name, device="cpu", tiny=True)
    assert workload.module.config._attn_implementation == "eager"
    assert any(op == "bmm" for op, *_ in _gemms(name))


def test_full_size_networks_keep_few_distinct_gemms_and_the_fp32_attention_bmms() -> None:
    """Built on the meta device (no weights, no compute): the shapes the GPU comparison autotunes.
    BERT's attention at 16 x 512 is the pair of float32 bmms (192 = sequences x heads) that ran
    slower under the handler than under Inductor's own candidates."""
    pytest.importorskip("transformers")
    bert = _gemms("bert-base-2layer-fp32/prefill", device="meta", tiny=False)
    assert ("bmm", 192, 512, 512, 64, "float32") in bert and ("bmm", 192, 512, 64, 512, "float32") in bert
    assert {dtype for *_, dtype in bert} == {"float32"}
    bf16 = _gemms("bert-base-2layer/prefill", device="meta", tiny=False)
    assert {dtype for *_, dtype in bf16} == {"bfloat16"} and len(bf16) == len(bert) == 6
    assert len(_gemms("t5-base-2layer/prefill", device="meta", tiny=False)) == 6
    assert len(_gemms("convnext-tiny-2stage/prefill", device="meta", tiny=False)) == 5


def test_convnext_runs_depthwise_convolutions_and_pointwise_linears() -> None:
    pytest.importorskip("transformers")
    workload = model_zoo.build_workload("convnext-tiny-2stage/prefill", device="cpu", tiny=True)
    convs = [m for m in workload.module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.groups == c.in_channels == c.out_channels for c in convs].count(True) == 2  # one per stage
    assert all(op == "addmm" for op, *_ in _gemms("convnext-tiny-2stage/prefill"))


def test_swin_runs_window_attention_as_batched_matmuls_over_7x7_windows() -> None:
    """Full size on the meta device: each stage's windows of 49 tokens, one bmm pair per stage (batch =
    32 images x windows x heads; the first stage: 64 windows of 56 x 56 patches, 3 heads)."""
    pytest.importorskip("transformers")
    swin = _gemms("swin-tiny-4stage/prefill", device="meta", tiny=False)
    windowed = sorted(batch for op, batch, m, n, k, _ in swin if (op, m, n, k) == ("bmm", 49, 49, 32))
    assert windowed == [32 * 1 * 24, 32 * 4 * 12, 32 * 16 * 6, 32 * 64 * 3]
    assert ("addmm", 1, 32 * 56 * 56, 96, 96, "bfloat16") in swin  # the first stage's projections


def test_the_speech_encoder_runs_thirty_seconds_as_1500_tokens() -> None:
    pytest.importorskip("transformers")
    whisper = _gemms("whisper-medium-encoder-2layer/prefill", device="meta", tiny=False)
    assert ("addmm", 1, 8 * 1500, 4096, 1024, "bfloat16") in whisper  # the MLP's first GEMM, 8 clips
    workload = model_zoo.build_workload("whisper-medium-encoder-2layer/prefill", device="cpu", tiny=True)
    assert workload.sizes == {"batch": 2, "frames": 32}


def test_the_moe_network_runs_its_experts_as_grouped_gemms() -> None:
    """transformers' default experts implementation: every expert's GEMM in one torch._grouped_mm per
    projection, not a loop over the experts (whose data-dependent token counts break the graph)."""
    pytest.importorskip("transformers")
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.seen.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    workload = model_zoo.build_workload("qwen3-moe-2layer/prefill", device="cpu", tiny=True)
    with Ops() as ops:
        workload.make_step(workload.module)()
    assert ops.seen.count("aten._grouped_mm") == 2 * 2  # 2 layers x (gate-up, down)


def test_architectures_name_their_phases_and_dtype() -> None:
    assert "bert-base-2layer/decode" not in model_zoo.workload_names()  # an encoder has no decode step
    assert model_zoo.parse_workloads("t5-base-2layer") == ["t5-base-2layer/prefill"]
    assert model_zoo.ARCHITECTURES["bert-base-2layer-fp32"].dtype == "float32"
    assert model_zoo.ARCHITECTURES["qwen3-4b-2layer"].sizes.prefill_seq == 2048
