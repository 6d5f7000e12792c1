"""Whole networks to compile: real architectures with random weights, built from `transformers`
config objects (nothing is downloaded) plus a recommendation-style MLP tower in plain torch.

Each architecture is built at full size for the GPU comparison or `tiny` (narrow and shallow,
through the same builder and the same code paths) for CPU tests. The full-size networks keep
only a layer or two of their real depth: every GEMM shape of the real network, few distinct
ones, so autotuning them all stays short. A *workload* is one architecture in one phase:

  prefill  inference over a batch of full inputs: B sequences of S tokens (language models,
           encoders; an encoder-decoder also runs a decoder input of its own length), B images
           (ViT, ConvNeXt, Swin), B clips of 30 s (the speech encoder), B examples (the
           recommendation tower)
  decode   inference at the smallest useful batch: one new token per sequence against a static
           KV cache of S tokens (decoder language models; the GEMMs have M = B), one image, one example
  train    forward + loss + backward + AdamW step (GPT-2 and the Llama-shaped decoder)

An architecture has the phases its `phases` name, and runs in its own `dtype` (bf16, or fp32
for the variant that covers float32 attention `bmm`s).

`build_workload(name, device=..., tiny=...)` returns a `Workload` whose `make_step(fn)` gives a
zero-argument callable running one step through `fn`, the module itself or a compiled wrapper
of it; the worker times that callable. `transformers` is imported only when a transformers
architecture is built (it is the optional `models` extra).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kernel_select.errors import OptionError
from kernel_select.offline.e2e.model_steps import STEP_BUILDERS, MakeStep, Sizes, transformers_module

PHASES = ("prefill", "decode", "train")


@dataclasses.dataclass
class Workload:
    """One architecture in one phase, built and ready to run."""

    name: str  # "<architecture>/<phase>"
    architecture: str
    phase: str
    module: Any  # the torch.nn.Module to compile
    sizes: dict[str, Any]  # what the step runs on, for the results file
    make_step: MakeStep


def require_transformers(names: list[str]) -> None:
    """Fail early, with the install hint, when a workload of `names` needs transformers.

    Raises:
        OptionError: when transformers is missing and needed.
    """
    if any(ARCHITECTURES[name.split("/")[0]].kind != "recsys" for name in names):
        transformers_module()


# -- architectures -------------------------------------------------------------------------------

def gpt2_small(tiny: bool = False) -> Any:
    """GPT-2 small (124M): 12 layers, width 768, 12 heads, vocabulary 50257."""
    t = transformers_module()
    if tiny:
        return t.GPT2LMHeadModel(t.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=512, n_positions=128,
                                              bos_token_id=0, eos_token_id=0))
    return t.GPT2LMHeadModel(t.GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=50257,
                                          n_positions=1024))


def llama3_8b_2layer(tiny: bool = False) -> Any:
    """Llama-3-8B at full width (hidden 4096, MLP 14336, 32 heads, 8 KV heads, vocabulary 128256)
    but only 2 of its 32 layers: every GEMM shape of the real model, at 1/16 of the layers."""
    t = transformers_module()
    if tiny:
        config = t.LlamaConfig(hidden_size=64, intermediate_size=224, num_attention_heads=4,
                               num_key_value_heads=2, num_hidden_layers=2, vocab_size=512,
                               max_position_embeddings=256)
    else:
        config = t.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                               num_key_value_heads=8, num_hidden_layers=2, vocab_size=128256,
                               max_position_embeddings=8192, rope_theta=500000.0)
    return t.LlamaForCausalLM(config)


def vit_b16(tiny: bool = False) -> Any:
    """ViT-B/16 at 224x224: 12 layers, width 768, MLP 3072, 196 patches + the class token."""
    t = transformers_module()
    if tiny:
        config = t.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=128, image_size=32, patch_size=16)
    else:
        config = t.ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, image_size=224, patch_size=16)
    model = t.ViTForImageClassification(config)
    implementation = unmasked_sdpa()
    if implementation is not None and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    return model


#: The attention implementation `unmasked_sdpa` registers with transformers.
UNMASKED_SDPA = "sdpa_unmasked"


def unmasked_sdpa() -> str | None:
    """Register (once) and name an attention implementation that is transformers' SDPA, except
    that a bidirectional mask with no padding is never built: SDPA gets no mask at all.

    Why: transformers skips that mask in eager mode, but some releases (5.17, which the GPU
    machine has) build it anyway while Dynamo traces, "to avoid data-dependent control flow". A
    compiled ViT then hands SDPA an all-True [B, 1, 197, 197] mask that no fused kernel takes
    (197 is not a multiple of 8), so the graph falls back to SDPA's math path: float32 `bmm`s
    around a softmax, 1.9x slower than the cuDNN attention eager runs. Newer releases skip the
    mask under Dynamo too; with this, every transformers version compiles the same graph.
    None on a transformers without attention and mask interfaces (before about 4.53): its ViT has
    its own SDPA attention, which builds no mask."""
    t = transformers_module()
    try:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    except ImportError:
        return None

    if UNMASKED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS:
        sdpa_mask = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]

        def mask(*args: Any, **kwargs: Any) -> Any:
            # `allow_is_bidirectional_skip` is transformers' own flag for "plain bidirectional,
            # nothing added to the mask function"; with no padding mask there is nothing to mask.
            if kwargs.get("attention_mask") is None and kwargs.get("allow_is_bidirectional_skip", False):
                return None
            return sdpa_mask(*args, **kwargs)

        t.AttentionInterface.register(UNMASKED_SDPA, sdpa_attention_forward)
        AttentionMaskInterface.register(UNMASKED_SDPA, mask)
    return UNMASKED_SDPA


def qwen3_4b_2layer(tiny: bool = False) -> Any:
    """A Llama-shaped decoder at Qwen3-4B's widths (hidden 2560, MLP 9728, 32 query heads of 128,
    8 KV heads, vocabulary 151936), 2 layers: the GEMMs of a 2,560-wide decoder's prefill. Built
    from LlamaConfig, so without Qwen3's per-head q/k norms (they run no GEMM)."""
    t = transformers_module()
    if tiny:
        return llama3_8b_2layer(tiny=True)
    config = t.LlamaConfig(hidden_size=2560, intermediate_size=9728, num_attention_heads=32,
                           num_key_value_heads=8, head_dim=128, num_hidden_layers=2, vocab_size=151936,
                           max_position_embeddings=40960, rope_theta=1000000.0)
    return t.LlamaForCausalLM(config)


def bert_base_2layer(tiny: bool = False) -> Any:
    """A BERT-base masked LM (width 768, 12 heads, MLP 3072, vocabulary 30522), 2 of its 12 layers,
    with transformers' eager attention: scores and context are two batched matmuls (`bmm`, batch
    = sequences x heads) around a softmax, where SDPA would run one fused kernel."""
    t = transformers_module()
    if tiny:
        config = t.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=128, vocab_size=512, max_position_embeddings=64,
                              attn_implementation="eager")
    else:
        config = t.BertConfig(hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                              intermediate_size=3072, vocab_size=30522, max_position_embeddings=512,
                              attn_implementation="eager")
    return t.BertForMaskedLM(config)


def t5_base_2layer(tiny: bool = False) -> Any:
    """A T5-base encoder-decoder (d_model 768, 12 heads of 64, MLP 3072, vocabulary 32128), 2 encoder
    and 2 decoder layers: self-attention in both stacks, cross-attention from the decoder, the LM
    head over the decoder's tokens. Eager attention (bmm), as T5's relative position bias had
    it before transformers gave T5 SDPA; set explicitly so every transformers version runs it.
    Its full-size workload gives the decoder as many tokens as the encoder, so that both stacks
    share their GEMM shapes: 6 distinct ones to autotune, where a 128-token decoder makes 13."""
    t = transformers_module()
    if tiny:
        config = t.T5Config(d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=2, num_decoder_layers=2,
                            vocab_size=512, attn_implementation="eager")
    else:
        config = t.T5Config(d_model=768, d_kv=64, d_ff=3072, num_heads=12, num_layers=2, num_decoder_layers=2,
                            vocab_size=32128, attn_implementation="eager")
    return t.T5ForConditionalGeneration(config)


def convnext_tiny_2stage(tiny: bool = False) -> Any:
    """ConvNeXt-T's first two stages (widths 96 and 192), one block each, at 224x224: a 4x4 stem
    convolution, 7x7 depthwise convolutions, the blocks' pointwise layers as `nn.Linear` GEMMs
    over every pixel (M = batch x H x W), a 2x2 downsampling convolution and an ImageNet classifier."""
    t = transformers_module()
    if tiny:
        config = t.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32)
    else:
        config = t.ConvNextConfig(num_stages=2, hidden_sizes=[96, 192], depths=[1, 1], image_size=224,
                                  num_labels=1000)
    return t.ConvNextForImageClassification(config)


def swin_tiny_4stage(tiny: bool = False) -> Any:
    """Swin-T (patch 4, window 7, embed 96, heads 3-6-12-24, MLP ratio 4) at 224x224 with one block per
    stage (of 2-2-6-2): every stage's GEMM shapes. Window attention runs as two batched matmuls per
    block (`bmm`, batch = images x windows x heads, 49 x 49 x 32), with transformers' eager attention,
    as transformers ran Swin before giving it SDPA; set explicitly so every version runs it."""
    t = transformers_module()
    if tiny:
        config = t.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                              window_size=4, attn_implementation="eager")
    else:
        config = t.SwinConfig(image_size=224, patch_size=4, embed_dim=96, depths=[1, 1, 1, 1],
                              num_heads=[3, 6, 12, 24], window_size=7, num_labels=1000,
                              attn_implementation="eager")
    return t.SwinForImageClassification(config)


def whisper_medium_encoder_2layer(tiny: bool = False) -> Any:
    """A speech encoder at Whisper-medium's widths (d_model 1024, 16 heads, MLP 4096, 80 mel bins), 2 of
    its 24 encoder layers, with an audio-classification head: two 1-D convolutions turn 30 s of mel
    frames (3,000) into 1,500 tokens, then the transformer layers (transformers' own attention, SDPA)
    and a mean-pooled classifier."""
    t = transformers_module()
    if tiny:
        config = t.WhisperConfig(d_model=64, encoder_attention_heads=4, encoder_ffn_dim=128, encoder_layers=2,
                                 decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                                 num_mel_bins=8, max_source_positions=16, vocab_size=512)
    else:
        config = t.WhisperConfig(d_model=1024, encoder_attention_heads=16, encoder_ffn_dim=4096,
                                 encoder_layers=2, decoder_layers=2, decoder_attention_heads=16,
                                 decoder_ffn_dim=4096, num_mel_bins=80, max_source_positions=1500,
                                 vocab_size=51865)
    return t.WhisperForAudioClassification(config)


def qwen3_moe_2layer(tiny: bool = False) -> Any:
    """A mixture-of-experts decoder at Qwen3-30B-A3B's widths (hidden 2048, 32 query heads of 128, 4 KV
    heads, 128 experts of MLP width 768, 8 experts per token, vocabulary 151936), 2 of its 48 layers.
    transformers runs the experts as grouped GEMMs (`torch._grouped_mm` over the tokens sorted by
    expert; its `experts_implementation` default in 5.17 and 5.24), which Inductor autotunes itself;
    the attention projections, the router and the LM head are plain GEMMs."""
    t = transformers_module()
    if tiny:
        config = t.Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                  num_experts=8, num_experts_per_tok=2, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=512,
                                  max_position_embeddings=256)
    else:
        config = t.Qwen3MoeConfig(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                                  num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                                  num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                                  num_hidden_layers=2, vocab_size=151936, max_position_embeddings=40960)
    return t.Qwen3MoeForCausalLM(config)


def recsys_tower(tiny: bool = False) -> Any:
    """A DLRM-style recommendation model: 26 embedding tables and a bottom MLP over 13 dense
    features feed a top MLP (1024-1024-512-256-1) through a concatenation."""
    import torch
    from torch import nn

    scale = 16 if tiny else 1
    dim, rows, tables = 128 // scale, (1000 if tiny else 100_000), 26

    def mlp(widths: list[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
        return nn.Sequential(*layers)

    class Recsys(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
            self.bottom = mlp([13, 512 // scale, 256 // scale, dim])
            self.top = mlp([dim * (tables + 1)] + [w // scale for w in (1024, 1024, 512, 256)] + [1])

        def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
            embedded = [table(sparse[:, i]) for i, table in enumerate(self.tables)]
            return self.top(torch.cat([self.bottom(dense), *embedded], dim=1))

    model = Recsys()
    model.sizes = {"dense": 13, "tables": tables, "rows": rows}
    return model


@dataclasses.dataclass(frozen=True)
class Architecture:
    name: str
    build: Callable[[bool], Any]
    kind: str  # "lm", "mlm", "seq2seq", "vision", "audio" or "recsys": how inputs are made
    sizes: Sizes
    tiny_sizes: Sizes
    phases: tuple[str, ...]
    dtype: str = "bfloat16"  # the torch dtype the network runs in


_ALL = PHASES
_INFERENCE = ("prefill", "decode")
_PREFILL = ("prefill",)
_TINY_LM = Sizes(2, 16, 2, 2, 16)

ARCHITECTURES = {arch.name: arch for arch in (
    Architecture("gpt2-small", gpt2_small, "lm", Sizes(8, 1024, 8, 8, 1024), _TINY_LM, _ALL),
    Architecture("llama3-8b-2layer", llama3_8b_2layer, "lm", Sizes(1, 2048, 8, 1, 2048), _TINY_LM, _ALL),
    Architecture("vit-b16", vit_b16, "vision", Sizes(64, 0, 1, 0, 0), Sizes(2, 0, 1, 0, 0), _INFERENCE),
    Architecture("recsys-mlp", recsys_tower, "recsys", Sizes(2048, 0, 1, 0, 0), Sizes(8, 0, 1, 0, 0),
                 _INFERENCE),
    Architecture("qwen3-4b-2layer", qwen3_4b_2layer, "lm", Sizes(1, 2048, 8, 0, 0), _TINY_LM, _PREFILL),
    Architecture("bert-base-2layer", bert_base_2layer, "mlm", Sizes(16, 512, 0, 0, 0), Sizes(2, 16, 0, 0, 0),
                 _PREFILL),
    Architecture("bert-base-2layer-fp32", bert_base_2layer, "mlm", Sizes(16, 512, 0, 0, 0),
                 Sizes(2, 16, 0, 0, 0), _PREFILL, dtype="float32"),
    Architecture("t5-base-2layer", t5_base_2layer, "seq2seq", Sizes(8, 512, 0, 0, 0, decoder_seq=512),
                 Sizes(2, 16, 0, 0, 0, decoder_seq=8), _PREFILL),
    Architecture("convnext-tiny-2stage", convnext_tiny_2stage, "vision", Sizes(32, 0, 0, 0, 0),
                 Sizes(2, 0, 0, 0, 0), _PREFILL),
    Architecture("swin-tiny-4stage", swin_tiny_4stage, "vision", Sizes(32, 0, 0, 0, 0), Sizes(2, 0, 0, 0, 0),
                 _PREFILL),
    Architecture("whisper-medium-encoder-2layer", whisper_medium_encoder_2layer, "audio",
                 Sizes(8, 0, 0, 0, 0), Sizes(2, 0, 0, 0, 0), _PREFILL),
    Architecture("qwen3-moe-2layer", qwen3_moe_2layer, "lm", Sizes(1, 2048, 0, 0, 0), _TINY_LM, _PREFILL),
)}


def workload_names() -> list[str]:
    """Every architecture/phase pair, in a stable order."""
    return [f"{arch.name}/{phase}" for arch in ARCHITECTURES.values() for phase in PHASES
            if phase in arch.phases]


def parse_workloads(text: str | None) -> list[str]:
    """"gpt2-small,vit-b16/prefill" -> the named workloads (an architecture alone = all its phases).

    Raises:
        OptionError: naming what is unknown and listing what exists.
    """
    names = workload_names()
    if not text:
        return names
    chosen: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        matches = [n for n in names if n == part or n.split("/")[0] == part]
        if not matches:
            raise OptionError(f"--models: unknown model {part!r}; choose from {', '.join(names)} "
                              f"(or an architecture: {', '.join(ARCHITECTURES)})")
        chosen += [m for m in matches if m not in chosen]
    return chosen


# -- workloads ------------------------------------------------------------------------------------

def build_workload(name: str, *, device: Any, dtype: Any = None, tiny: bool = False,
                   seed: int = 0) -> Workload:
    """Build `name` ("<architecture>/<phase>") with random weights on `device`, in `dtype` (default:
    the architecture's own).

    Raises:
        OptionError: for an unknown workload.
    """
    import torch

    if name not in workload_names():
        raise OptionError(f"unknown model workload {name!r}; choose from {', '.join(workload_names())}")
    arch_name, phase = name.split("/")
    arch = ARCHITECTURES[arch_name]
    torch.manual_seed(seed)
    module = arch.build(tiny).to(device=device, dtype=dtype or getattr(torch, arch.dtype))
    module.train(phase == "train")
    sizes = arch.tiny_sizes if tiny else arch.sizes
    used, make_step = STEP_BUILDERS[arch.kind](module, phase, sizes, device)
    return Workload(name, arch_name, phase, module, used, make_step)


