"""Where the round-3 plan's batched shapes come from (round3_plan.py): the attention blocks and the MoE
expert layers of the architecture table (offline/data/architectures.py), held-out families left out,
plus attention blocks of head dims the table lacks (SWEEP_FAMILY)."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_select.offline.data import splits
from kernel_select.offline.data.architectures import ARCHITECTURES, Architecture


@dataclass(frozen=True)
class AttentionBlock:
    """One attention block: its architecture (a name of the table, or SWEEP_FAMILY), heads and head
    dim (each model's config.json), the token counts it runs at, how many sequences (images,
    requests) one call holds, whether it decodes, and for cross-attention the keys' count."""

    family: str
    heads: int
    head_dim: int
    tokens: tuple[int, int]
    sequences: tuple[int, int]
    decodes: bool = False
    context: int = 0  # cross-attention: the keys are this many text tokens
    level: str = ""  # which of the architecture's attention blocks (UNet levels)


def _llm(name: str, heads: int, head_dim: int, positions: int) -> AttentionBlock:
    return AttentionBlock(name, heads, head_dim, (17, positions), (1, 8), decodes=True)


SWEEP_FAMILY = "attn-sweep"
#: Attention of the table's architectures (heads, head dim and context length from config.json;
#: the UNets' heads per level from their diffusers configs, cross-attending to 77 CLIP tokens).
#: Held-out families (splits.HELD_OUT_FAMILIES) are left out: their problems are never trained on.
ATTENTION: tuple[AttentionBlock, ...] = (
    _llm("llama3-8b", 32, 128, 8192), _llm("llama3.2-1b", 32, 64, 32768), _llm("llama3.2-3b", 24, 128, 32768),
    _llm("llama2-7b", 32, 128, 4096), _llm("llama2-13b", 40, 128, 4096), _llm("qwen2.5-0.5b", 14, 64, 32768),
    _llm("qwen2.5-7b", 28, 128, 32768), _llm("qwen2.5-14b", 40, 128, 32768), _llm("gemma2-2b", 8, 256, 8192),
    _llm("tinyllama-1.1b", 32, 64, 2048), _llm("smollm-135m", 9, 64, 2048),
    _llm("mistral-nemo-12b", 32, 128, 32768), _llm("gpt2", 12, 64, 1024), _llm("gpt2-xl", 25, 64, 1024),
    _llm("falcon-7b", 71, 64, 2048), _llm("pythia-2.8b", 32, 80, 2048), _llm("opt-1.3b", 32, 64, 2048),
    _llm("mixtral-8x7b", 32, 128, 32768), _llm("deepseek-moe-16b", 16, 128, 4096),
    _llm("qwen1.5-moe-a2.7b", 16, 128, 8192),
    AttentionBlock("deit-s16", 6, 64, (50, 1025), (1, 256)),  # 224 px: 197 tokens, 384 px: 577
    AttentionBlock("vit-h14", 16, 80, (257, 1370), (1, 64)),  # 224 px: 257, 518 px: 1370
    AttentionBlock("dit-xl2", 16, 72, (64, 4096), (2, 64)),  # latent patches; pairs for guidance
    AttentionBlock("sd1.5-unet", 8, 40, (1024, 16384), (2, 16), level="320"),
    AttentionBlock("sd1.5-unet", 8, 80, (256, 4096), (2, 16), level="640"),
    AttentionBlock("sd1.5-unet", 8, 160, (64, 1024), (2, 16), level="1280"),
    AttentionBlock("sd1.5-unet", 8, 40, (1024, 16384), (2, 16), context=77, level="320"),
    AttentionBlock("sd1.5-unet", 8, 80, (256, 4096), (2, 16), context=77, level="640"),
    AttentionBlock("sd1.5-unet", 8, 160, (64, 1024), (2, 16), context=77, level="1280"),
    AttentionBlock("sdxl-unet", 10, 64, (1024, 16384), (2, 8), level="640"),
    AttentionBlock("sdxl-unet", 20, 64, (256, 4096), (2, 8), level="1280"),
    AttentionBlock("sdxl-unet", 10, 64, (1024, 16384), (2, 8), context=77, level="640"),
    AttentionBlock("sdxl-unet", 20, 64, (256, 4096), (2, 8), context=77, level="1280"),
    AttentionBlock("whisper-base", 8, 64, (50, 1500), (1, 32)),
    AttentionBlock("wav2vec2-base", 12, 64, (50, 3000), (1, 32)),
    AttentionBlock("hubert-large", 16, 64, (50, 3000), (1, 32)),
    AttentionBlock("bert-base", 12, 64, (17, 512), (1, 256)),
    AttentionBlock("bert-large", 16, 64, (17, 512), (1, 256)),
    AttentionBlock("t5-base", 12, 64, (17, 2048), (1, 64)),
    # head dims no architecture of the table has, between its 40 and 256
    *(AttentionBlock(SWEEP_FAMILY, 16, d, (17, 16384), (1, 64), decodes=True)
      for d in (32, 48, 96, 112, 192)),
)
TENSOR_PARALLEL = (1, 2, 4, 8)
DECODE_BATCH = (1, 256)  # requests one decode step serves


@dataclass(frozen=True)
class ExpertLayer:
    """One batched expert GEMM of an MoE of the table: experts, in and out features (its layer)."""

    family: str
    layer: str
    experts: int
    fan_in: int
    fan_out: int


def expert_layers() -> tuple[ExpertLayer, ...]:
    """The expert layers of the table's MoE architectures (the router and the shared expert are
    not batched), held-out families left out."""
    return tuple(ExpertLayer(arch.name, layer, EXPERTS[arch.name], fan_in, fan_out)
                 for arch in ARCHITECTURES if arch.name in EXPERTS
                 for layer, fan_in, fan_out in arch.layers if layer.startswith("expert"))


#: Routed experts of the table's MoEs (config.json: num_local_experts / n_routed_experts / num_experts).
EXPERTS = {"mixtral-8x7b": 8, "deepseek-moe-16b": 64, "qwen1.5-moe-a2.7b": 60}
EXPERT_PARALLEL = (1, 2, 4, 8)


def trainable_architectures() -> list[Architecture]:
    """The table's architectures but the held-out families (splits.HELD_OUT_FAMILIES)."""
    return [a for a in ARCHITECTURES if a.name not in splits.HELD_OUT_FAMILIES]
