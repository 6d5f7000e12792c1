"""Layer dimensions of open architectures, for the training problems of the samplers.

Hand-written from each model's published configuration (config.json on its model card, or the
paper's architecture table); nothing is downloaded. Each entry is a linear layer of `in_features`
and `out_features`; its architecture says how the weight W is stored (`Architecture.weights`):

  * OUT_IN, (out, in): `nn.Linear`, almost every model;
  * IN_OUT, (in, out): Hugging Face's GPT-2 `Conv1D` (`addmm(b, x, W)`).

One layer gives three GEMMs, each with (m, n, k) and the operand layout (kernel_select.layouts:
A's letter then B's, "t" = read through a transposed view) as Inductor's mm / addmm sees them,
which is what `pretune` discovers in a compiled program (tests/offline/test_sampler.py checks it):

  GEMM  weights (out, in)        weights (in, out)         m x n x k
  fwd   y  = x @ W.t()     "nt"  y  = x @ W          "nn"  tokens x out x in
  dX    dx = dy @ W        "nn"  dx = dy @ W.t()     "nt"  tokens x in  x out
  dW    dW = dy.t() @ x    "tn"  dW = x.t() @ dy     "tn"  W's shape (out x in, or in x out) x tokens

The rule: an operand is "t" exactly when the product reads a stored tensor transposed -- the
weight where the GEMM needs it the other way round from its storage, and the activation or its
gradient as the weight gradient's A. The coverage plan (`sampler.coverage_shapes`) predates
layouts: it took every weight as (in, out) and timed every GEMM "nn"; it asks for
`layer_gemms(arch, IN_OUT)` and drops the layout, so its problems do not change.

A language model's output head (`Architecture.head`: hidden -> vocabulary) is kept apart from its
layers: every plan written before it was recorded drew from the layers alone, and `head_gemms` gives
its GEMMs for the plans that ask for them. Its weight is the (vocabulary, hidden) embedding or an
nn.Linear's, so OUT_IN in every architecture, GPT-2's included (its head is tied to `wte`).

Token counts are per kind (TOKENS): decode batches, prefill lengths and training micro-batches for
language models; patches x images for vision; latent tokens for diffusion; frames for speech; the
batch size for recommendation MLPs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kernel_select.errors import ProblemError

KINDS = ("decoder-llm", "moe", "vision", "diffusion", "speech", "recommendation", "encoder")
#: How a layer's weight is stored: nn.Linear's (out_features, in_features), or GPT-2 Conv1D's (in, out).
OUT_IN = "out_in"
IN_OUT = "in_out"
WEIGHT_STORAGES = (OUT_IN, IN_OUT)


@dataclass(frozen=True)
class Architecture:
    name: str
    kind: str
    layers: tuple[tuple[str, int, int], ...]  # (layer, in_features, out_features)
    weights: str = OUT_IN  # OUT_IN (nn.Linear) or IN_OUT (GPT-2's Conv1D)
    head: tuple[int, int] | None = None  # (hidden, vocabulary) of a language model's output head


def _llm(name: str, hidden: int, kv: int, ffn: int, q: int | None = None, vocab: int | None = None,
         ) -> Architecture:
    """A Llama-style decoder: separate q/k/v/o projections and a gated MLP."""
    q = q or hidden
    return Architecture(name, "decoder-llm", (
        ("q_proj", hidden, q), ("kv_proj", hidden, kv), ("o_proj", q, hidden),
        ("gate_up_proj", hidden, 2 * ffn), ("down_proj", ffn, hidden)), head=_head(hidden, vocab))


def _fused(name: str, kind: str, hidden: int, qkv: int, ffn: int, weights: str = OUT_IN,
           vocab: int | None = None) -> Architecture:
    """A GPT/ViT-style block: fused qkv, output projection, two-layer MLP."""
    return Architecture(name, kind, (
        ("qkv", hidden, qkv), ("attn_out", hidden, hidden), ("fc1", hidden, ffn), ("fc2", ffn, hidden)),
        weights, head=_head(hidden, vocab))


def _head(hidden: int, vocab: int | None) -> tuple[int, int] | None:
    return None if vocab is None else (hidden, vocab)


ARCHITECTURES: tuple[Architecture, ...] = (
    # decoder LLMs, 135M to 70B: (hidden, num_kv_heads x head_dim, intermediate)
    _llm("llama3-8b", 4096, 1024, 14336, vocab=128256),
    _llm("llama3-70b", 8192, 1024, 28672, vocab=128256),
    _llm("llama3.2-1b", 2048, 512, 8192, vocab=128256),
    _llm("llama3.2-3b", 3072, 1024, 8192, vocab=128256),
    _llm("llama2-7b", 4096, 4096, 11008, vocab=32000),
    _llm("llama2-13b", 5120, 5120, 13824, vocab=32000),
    _llm("qwen2.5-0.5b", 896, 128, 4864, vocab=151936),
    _llm("qwen2.5-7b", 3584, 512, 18944, vocab=152064),
    _llm("qwen2.5-14b", 5120, 1024, 13824, vocab=152064),
    _llm("gemma2-2b", 2304, 1024, 9216, q=2048, vocab=256000),  # 8 heads x 256
    _llm("gemma2-9b", 3584, 2048, 14336, q=4096, vocab=256000),  # 16 heads x 256
    _llm("tinyllama-1.1b", 2048, 256, 5632, vocab=32000),
    _llm("smollm-135m", 576, 192, 1536, vocab=49152),
    _llm("mistral-nemo-12b", 5120, 1024, 14336, q=4096, vocab=131072),  # 32 heads x 128
    Architecture("phi3-mini", "decoder-llm", (
        ("qkv_proj", 3072, 9216), ("o_proj", 3072, 3072), ("gate_up_proj", 3072, 16384),
        ("down_proj", 8192, 3072)), head=(3072, 32064)),
    _fused("gpt2", "decoder-llm", 768, 2304, 3072, IN_OUT, vocab=50257),  # transformers' GPT-2 uses Conv1D
    _fused("gpt2-xl", "decoder-llm", 1600, 4800, 6400, IN_OUT, vocab=50257),
    _fused("falcon-7b", "decoder-llm", 4544, 4672, 18176, vocab=65024),  # 71 heads x 64 + one shared k/v
    _fused("pythia-2.8b", "decoder-llm", 2560, 7680, 10240, vocab=50304),
    _fused("opt-1.3b", "decoder-llm", 2048, 6144, 8192, vocab=50272),
    # MoE: one expert's MLP (tokens routed to it) and the router
    Architecture("mixtral-8x7b", "moe", (
        ("expert_w1_w3", 4096, 2 * 14336), ("expert_w2", 14336, 4096), ("router", 4096, 8)),
        head=(4096, 32000)),
    Architecture("deepseek-moe-16b", "moe", (
        ("expert_gate_up", 2048, 2 * 1408), ("expert_down", 1408, 2048), ("router", 2048, 64)),
        head=(2048, 102400)),
    Architecture("qwen1.5-moe-a2.7b", "moe", (
        ("expert_gate_up", 2048, 2 * 1408), ("shared_expert_gate_up", 2048, 2 * 5632),
        ("shared_expert_down", 5632, 2048), ("router", 2048, 60)), head=(2048, 151936)),
    Architecture("olmoe-1b-7b", "moe", (
        ("expert_gate_up", 2048, 2 * 1024), ("expert_down", 1024, 2048), ("router", 2048, 64)),
        head=(2048, 50304)),
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


#: Layout of each GEMM of a layer per weight storage (see the module docstring).
GEMM_LAYOUTS: dict[str, dict[str, str]] = {
    OUT_IN: {"fwd": "nt", "dX": "nn", "dW": "tn"},
    IN_OUT: {"fwd": "nn", "dX": "nt", "dW": "tn"},
}


@dataclass(frozen=True)
class LayerGemm:
    m: int
    n: int
    k: int
    family: str
    layer: str  # e.g. "q_proj fwd", "q_proj dX", "q_proj dW"
    regime: str  # decode | prefill | train
    layout: str  # operand layout as Inductor's mm sees it (kernel_select.layouts)


def _three_gemms(tokens: int, fan_in: int, fan_out: int, weights: str) -> dict[str, tuple[int, int, int]]:
    """(m, n, k) of the forward, input-gradient and weight-gradient GEMMs; dW has W's shape."""
    dw_rows, dw_cols = (fan_out, fan_in) if weights == OUT_IN else (fan_in, fan_out)
    return {"fwd": (tokens, fan_out, fan_in), "dX": (tokens, fan_in, fan_out),
            "dW": (dw_rows, dw_cols, tokens)}


def layer_gemms(arch: Architecture, weights: str | None = None) -> list[LayerGemm]:
    """Every GEMM of `arch`: forward at every token count; both backward GEMMs at training sizes
    (backward passes only run when training). `weights` overrides how the architecture stores
    its weights (IN_OUT gives the coverage plan's sizes for every architecture)."""
    weights = weights or arch.weights
    if weights not in WEIGHT_STORAGES:
        raise ProblemError(f"weights: expected one of {', '.join(WEIGHT_STORAGES)}, got {weights!r}")
    out = []
    for layer, fan_in, fan_out in arch.layers:
        for regime, tokens in TOKENS[arch.kind].items():
            for t in tokens:
                gemms = _three_gemms(t, fan_in, fan_out, weights)
                for gemm in ("fwd", "dX", "dW") if regime == "train" else ("fwd",):
                    m, n, k = gemms[gemm]
                    out.append(LayerGemm(m, n, k, arch.name, f"{layer} {gemm}", regime,
                                         GEMM_LAYOUTS[weights][gemm]))
    return out


def layer_gemms_at(arch: Architecture, tokens: int, regime: str,
                   gemms: tuple[str, ...] = ("fwd", "dX", "dW")) -> list[LayerGemm]:
    """Each layer's `gemms` of `arch` at one token count (any count, not only TOKENS'), in the
    layouts its weight storage gives them."""
    out = []
    for layer, fan_in, fan_out in arch.layers:
        sizes = _three_gemms(tokens, fan_in, fan_out, arch.weights)
        for gemm in gemms:
            m, n, k = sizes[gemm]
            out.append(LayerGemm(m, n, k, arch.name, f"{layer} {gemm}", regime,
                                 GEMM_LAYOUTS[arch.weights][gemm]))
    return out


def all_layer_gemms(weights: str | None = None) -> list[LayerGemm]:
    return [g for arch in ARCHITECTURES for g in layer_gemms(arch, weights)]


def head_gemms(arch: Architecture) -> list[LayerGemm]:
    """The GEMMs of `arch`'s output head, as `layer_gemms` gives a layer's (forward at every token
    count, both backward GEMMs at training sizes); none for an architecture without one."""
    if arch.head is None:
        return []
    return layer_gemms(dataclasses.replace(arch, layers=(("lm_head", *arch.head),), weights=OUT_IN))


def all_head_gemms() -> list[LayerGemm]:
    return [g for arch in ARCHITECTURES for g in head_gemms(arch)]


#: LoRA ranks planned: PEFT's default (8) to the largest common in fine-tuning recipes.
LORA_RANKS = (8, 16, 32, 64)


def lora_gemms(arch: Architecture, ranks: tuple[int, ...] = LORA_RANKS) -> list[LayerGemm]:
    """The GEMMs of LoRA adapters on every layer of `arch`, as `layer_gemms` gives a layer's: each
    adapter is two nn.Linear (OUT_IN) layers, A (in -> r) and B (r -> out), run beside the frozen
    layer in fine-tuning (forward, input and weight gradients) and in serving unmerged adapters
    (forward). Their r-sized dimension puts small N, K or M in every layout: the weight gradient of
    A is r x in x tokens, a `tn` GEMM with M = r, which no layer of the table has."""
    layers = tuple((f"{layer} lora_{part} r{r}", fan_in, fan_out)
                   for layer, d_in, d_out in arch.layers for r in ranks
                   for part, fan_in, fan_out in (("A", d_in, r), ("B", r, d_out)))
    return layer_gemms(dataclasses.replace(arch, layers=layers, weights=OUT_IN, head=None))


def all_lora_gemms() -> list[LayerGemm]:
    return [g for arch in ARCHITECTURES for g in lora_gemms(arch)]


#: Which GEMMs of the architecture table a layer plan draws (`sampler.layer_shapes`): the layers,
#: the language models' output heads, or LoRA adapters on the layers.
GEMM_SOURCES = {"layers": all_layer_gemms, "heads": all_head_gemms, "lora": all_lora_gemms}
