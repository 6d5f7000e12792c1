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
@pytest.mark.parametrize("name", ["llama3-8b-2layer/decode", "gpt2-small/train"])
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
