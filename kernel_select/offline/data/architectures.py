"""Layer dimensions of open architectures, for the training problems of the coverage sampler.

Hand-written from each model's published configuration (config.json on its model card, or the
paper's architecture table); nothing is downloaded. Each entry is a linear layer y = x @ W with
W of shape (in_features, out_features). One layer gives three GEMMs (m x n x k):

  forward  y  = x  @ W      tokens x out x in
  dX       dx = dy @ W^T    tokens x in  x out
  dW       dW = x^T @ dy    in     x out x tokens

Token counts are per kind (TOKENS): decode batches, prefill lengths and training micro-batches for
language models; patches x images for vision; latent tokens for diffusion; frames for speech; the
batch size for recommendation MLPs.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("decoder-llm", "moe", "vision", "diffusion", "speech", "recommendation", "encoder")


@dataclass(frozen=True)
class Architecture:
    name: str
    kind: str
    layers: tuple[tuple[str, int, int], ...]  # (layer, in_features, out_features)


def _llm(name: str, hidden: int, kv: int, ffn: int, q: int | None = None) -> Architecture:
    """A Llama-style decoder: separate q/k/v/o projections and a gated MLP."""
    q = q or hidden
    return Architecture(name, "decoder-llm", (
        ("q_proj", hidden, q), ("kv_proj", hidden, kv), ("o_proj", q, hidden),
        ("gate_up_proj", hidden, 2 * ffn), ("down_proj", ffn, hidden)))


def _fused(name: str, kind: str, hidden: int, qkv: int, ffn: int) -> Architecture:
    """A GPT/ViT-style block: fused qkv, output projection, two-layer MLP."""
    return Architecture(name, kind, (
        ("qkv", hidden, qkv), ("attn_out", hidden, hidden), ("fc1", hidden, ffn), ("fc2", ffn, hidden)))


ARCHITECTURES: tuple[Architecture, ...] = (
    # decoder LLMs, 135M to 70B: (hidden, num_kv_heads x head_dim, intermediate)
    _llm("llama3-8b", 4096, 1024, 14336),
    _llm("llama3-70b", 8192, 1024, 28672),
    _llm("llama3.2-1b", 2048, 512, 8192),
    _llm("llama3.2-3b", 3072, 1024, 8192),
    _llm("llama2-7b", 4096, 4096, 11008),
    _llm("llama2-13b", 5120, 5120, 13824),
    _llm("qwen2.5-0.5b", 896, 128, 4864),
    _llm("qwen2.5-7b", 3584, 512, 18944),
    _llm("qwen2.5-14b", 5120, 1024, 13824),
    _llm("gemma2-2b", 2304, 1024, 9216, q=2048),  # 8 heads x 256
    _llm("gemma2-9b", 3584, 2048, 14336, q=4096),  # 16 heads x 256
    _llm("tinyllama-1.1b", 2048, 256, 5632),
    _llm("smollm-135m", 576, 192, 1536),
    _llm("mistral-nemo-12b", 5120, 1024, 14336, q=4096),  # 32 heads x 128
    Architecture("phi3-mini", "decoder-llm", (
        ("qkv_proj", 3072, 9216), ("o_proj", 3072, 3072), ("gate_up_proj", 3072, 16384),
        ("down_proj", 8192, 3072))),
    _fused("gpt2", "decoder-llm", 768, 2304, 3072),
    _fused("gpt2-xl", "decoder-llm", 1600, 4800, 6400),
    _fused("falcon-7b", "decoder-llm", 4544, 4672, 18176),  # 71 heads x 64 + one shared k/v
    _fused("pythia-2.8b", "decoder-llm", 2560, 7680, 10240),
    _fused("opt-1.3b", "decoder-llm", 2048, 6144, 8192),
    # MoE: one expert's MLP (tokens routed to it) and the router
    Architecture("mixtral-8x7b", "moe", (
        ("expert_w1_w3", 4096, 2 * 14336), ("expert_w2", 14336, 4096), ("router", 4096, 8))),
    Architecture("deepseek-moe-16b", "moe", (
        ("expert_gate_up", 2048, 2 * 1408), ("expert_down", 1408, 2048), ("router", 2048, 64))),
    Architecture("qwen1.5-moe-a2.7b", "moe", (
        ("expert_gate_up", 2048, 2 * 1408), ("shared_expert_gate_up", 2048, 2 * 5632),
        ("shared_expert_down", 5632, 2048), ("router", 2048, 60))),
    Architecture("olmoe-1b-7b", "moe", (
        ("expert_gate_up", 2048, 2 * 1024), ("expert_down", 1024, 2048), ("router", 2048, 64))),
    # vision transformers
    _fused("vit-b16", "vision", 768, 2304, 3072),
    _fused("vit-l14", "vision", 1024, 3072, 4096),
    _fused("vit-h14", "vision", 1280, 3840, 5120),
    _fused("deit-s16", "vision", 384, 1152, 1536),
    _fused("siglip-so400m", "vision", 1152, 3456, 4304),
    # diffusion: DiT / MMDiT blocks (with the adaLN modulation) and Stable Diffusion UNet attention
    Architecture("dit-xl2", "diffusion", (
        ("qkv", 1152, 3456), ("attn_out", 1152, 1152), ("fc1", 1152, 4608), ("fc2", 4608, 1152),
        ("adaln", 1152, 6 * 1152))),
    Architecture("sd3-medium-mmdit", "diffusion", (
        ("qkv", 1536, 4608), ("attn_out", 1536, 1536), ("fc1", 1536, 6144), ("fc2", 6144, 1536),
        ("adaln", 1536, 6 * 1536))),
    Architecture("sd1.5-unet", "diffusion", (
        ("attn_qkv_320", 320, 320), ("cross_kv_320", 768, 320), ("geglu_320", 320, 2560),
        ("ff_out_320", 1280, 320), ("attn_qkv_1280", 1280, 1280), ("geglu_1280", 1280, 10240))),
    Architecture("sdxl-unet", "diffusion", (
        ("attn_q_640", 640, 640), ("cross_kv_640", 2048, 640), ("geglu_640", 640, 5120),
        ("ff_out_640", 2560, 640), ("cross_kv_1280", 2048, 1280), ("ff_out_1280", 5120, 1280))),
    # speech
    _fused("whisper-large-v3", "speech", 1280, 3840, 5120),
    _fused("whisper-base", "speech", 512, 1536, 2048),
    Architecture("wav2vec2-base", "speech", (
        ("feature_projection", 512, 768), ("qkv", 768, 2304), ("fc1", 768, 3072), ("fc2", 3072, 768))),
    _fused("hubert-large", "speech", 1024, 3072, 4096),
    # recommendation MLPs: DLRM (Criteo: 13 dense features, 26 embeddings of 128, 27*26/2 + 128 =
    # 479 interaction features) and DCN-v2 (MLPerf: 27 x 128 = 3456 cross features, rank 512)
    Architecture("dlrm-criteo", "recommendation", (
        ("bottom_1", 13, 512), ("bottom_2", 512, 256), ("bottom_3", 256, 128),
        ("top_1", 479, 1024), ("top_2", 1024, 1024), ("top_3", 1024, 512), ("top_4", 512, 256))),
    Architecture("dcnv2-mlperf", "recommendation", (
        ("cross_down", 3456, 512), ("cross_up", 512, 3456), ("top_1", 3456, 1024),
        ("top_2", 1024, 1024), ("top_3", 1024, 512))),
    # encoders
    _fused("bert-base", "encoder", 768, 2304, 3072),
    _fused("bert-large", "encoder", 1024, 3072, 4096),
    Architecture("t5-base", "encoder", (
        ("q_proj", 768, 768), ("kv_proj", 768, 1536), ("wi", 768, 2048), ("wo", 2048, 768))),
)

#: Tokens (the GEMM's M in the forward pass) per regime and kind. Training sizes also give the
#: dW GEMM its K.
TOKENS: dict[str, dict[str, tuple[int, ...]]] = {
    "decoder-llm": {"decode": (1, 4, 16, 64), "prefill": (512, 2048), "train": (4096, 8192)},
    "moe": {"decode": (1, 8, 32), "prefill": (256, 1024), "train": (2048, 4096)},
    "vision": {"decode": (197, 257), "prefill": (197 * 8, 257 * 8), "train": (197 * 32, 257 * 16)},
    "diffusion": {"decode": (256, 1024), "prefill": (4096,), "train": (4096 * 2, 1024 * 8)},
    "speech": {"decode": (1, 8, 1500), "prefill": (1500 * 2,), "train": (1500 * 4, 1500 * 8)},
    "recommendation": {"decode": (64, 256), "prefill": (2048,), "train": (8192, 16384)},
    "encoder": {"decode": (128, 512), "prefill": (512 * 8,), "train": (512 * 16, 512 * 32)},
}


@dataclass(frozen=True)
class LayerGemm:
    m: int
    n: int
    k: int
    family: str
    layer: str  # e.g. "q_proj fwd", "q_proj dX", "q_proj dW"
    regime: str  # decode | prefill | train


def layer_gemms(arch: Architecture) -> list[LayerGemm]:
    """Every GEMM of `arch`: forward at every token count; both backward GEMMs at training sizes
    (backward passes only run when training)."""
    out = []
    for layer, fan_in, fan_out in arch.layers:
        for regime, tokens in TOKENS[arch.kind].items():
            for t in tokens:
                out.append(LayerGemm(t, fan_out, fan_in, arch.name, f"{layer} fwd", regime))
                if regime == "train":
                    out.append(LayerGemm(t, fan_in, fan_out, arch.name, f"{layer} dX", regime))
                    out.append(LayerGemm(fan_in, fan_out, t, arch.name, f"{layer} dW", regime))
    return out


def all_layer_gemms() -> list[LayerGemm]:
    return [g for arch in ARCHITECTURES for g in layer_gemms(arch)]
