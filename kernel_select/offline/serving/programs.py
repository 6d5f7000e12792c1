"""The programs the serving measurement serves at many sequence lengths (GPU to build and run).

- `seed`: the first user's `nn.Linear(3420 -> 1280)` in bf16, its forward GEMM and both backward
  GEMMs (grad input, grad weight) in one function, the length dynamic over 560..8192. Each
  GEMM's operand layout is the one pretune discovers for the same Linear (`LAYOUTS`).
- `decoder`: a Llama-3-8B-width decoder layer in bf16 (hidden 4096; grouped-query attention,
  32 query heads and 8 KV heads of 128, rotary embeddings, PyTorch's fused causal attention
  (scaled_dot_product_attention);
  SwiGLU MLP 14336; RMSNorm; no biases), the forward of a prefill of one sequence, the length
  dynamic over 128..8192: seven GEMMs of five shapes, M the length.

Each gives what the measurement runs (`build`, `inputs`, which dimension of which argument is the
length) and a factory for `kernel-select pretune --model` (`seed_factory`, `decoder_factory`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

IN_FEATURES, OUT_FEATURES = 3420, 1280
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP = 4096, 32, 8, 128, 14336

#: Each GEMM's operand layout in the seed program: the layouts pretune discovers from the
#: operands' strides for the same Linear.
LAYOUTS = {"forward": "nt", "grad_input": "nn", "grad_weight": "tn"}


@dataclasses.dataclass(frozen=True)
class Program:
    """A program served at many lengths: `build()` makes it on the GPU, `inputs(length)` its
    arguments at one length, `dims` maps an argument to its length dimension."""

    name: str
    description: str
    lengths: tuple[int, ...]  # served and timed, in this order
    low: int  # the range pretune tunes and the length is declared over
    high: int
    dims: dict[int, int]
    build: Callable[[], Callable[..., Any]]
    inputs: Callable[[int], tuple[Any, ...]]
    factory: str  # `kernel-select pretune --model` spec

    def bytes_per_call(self, length: int) -> int:
        """Bytes of the arguments at `length` (to size the L2-cold input rotation)."""
        return sum(t.numel() * t.element_size() for t in self.inputs(length))


# -- the seed program ----------------------------------------------------------------------------------

def gemm_sizes(length: int) -> dict[str, tuple[int, int, int]]:
    """The seed step's GEMMs at sequence length `length`: name -> (m, n, k)."""
    return {"forward": (length, OUT_FEATURES, IN_FEATURES),  # x @ W^T
            "grad_input": (length, IN_FEATURES, OUT_FEATURES),  # grad_y @ W
            "grad_weight": (OUT_FEATURES, IN_FEATURES, length)}  # grad_y^T @ x


def _seed_step() -> Callable[..., Any]:
    weight = torch.randn(OUT_FEATURES, IN_FEATURES, device="cuda", dtype=torch.bfloat16) / IN_FEATURES**0.5

    def step(x, grad_y):  # noqa: ANN001, ANN202 -- forward, grad input, grad weight
        return x @ weight.t(), grad_y @ weight, grad_y.t() @ x

    return step


def _seed_inputs(length: int) -> tuple[Any, ...]:
    return (torch.randn(length, IN_FEATURES, device="cuda", dtype=torch.bfloat16),
            torch.randn(length, OUT_FEATURES, device="cuda", dtype=torch.bfloat16))


SEED = Program("seed", f"Linear {IN_FEATURES}->{OUT_FEATURES} bf16, forward + grad input + grad weight",
               (560, 1024, 1500, 2048, 3000, 4096, 6000, 8192), 560, 8192, {0: 0, 1: 0}, _seed_step,
               _seed_inputs,
               "kernel_select.offline.serving.programs:seed_factory")


def seed_factory() -> tuple[Any, tuple[Any, ...], dict[int, tuple[int, int, int]]]:
    """`kernel-select pretune --model` factory of the seed program."""
    return SEED.build(), SEED.inputs(2048), {0: (0, SEED.low, SEED.high), 1: (0, SEED.low, SEED.high)}


# -- the decoder layer ---------------------------------------------------------------------------------

class DecoderLayer(torch.nn.Module):
    """The module doc's decoder layer, forward only; `forward(x)` takes x[batch, length, 4096]."""

    def __init__(self) -> None:
        super().__init__()

        def linear(inputs: int, outputs: int) -> torch.nn.Linear:
            return torch.nn.Linear(inputs, outputs, bias=False)

        self.q, self.o = linear(HIDDEN, HEADS * HEAD_DIM), linear(HEADS * HEAD_DIM, HIDDEN)
        self.k, self.v = linear(HIDDEN, KV_HEADS * HEAD_DIM), linear(HIDDEN, KV_HEADS * HEAD_DIM)
        self.gate, self.up, self.down = linear(HIDDEN, MLP), linear(HIDDEN, MLP), linear(MLP, HIDDEN)
        self.attention_norm = torch.nn.Parameter(torch.ones(HIDDEN))
        self.mlp_norm = torch.nn.Parameter(torch.ones(HIDDEN))
        self.register_buffer("inv_freq", 500000.0 ** (-torch.arange(0, HEAD_DIM, 2) / HEAD_DIM),
                             persistent=False)

    @staticmethod
    def _norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + 1e-5)).to(x.dtype) * weight

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        h = self._norm(x, self.attention_norm)
        q = self.q(h).view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(h).view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        angles = torch.outer(torch.arange(length, device=x.device, dtype=torch.float32), self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        # Each KV head serves HEADS / KV_HEADS query heads, repeated as Llama's own code does, so
        # the fused (flash) attention kernel runs at every length.
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attention.transpose(1, 2).reshape(batch, length, HEADS * HEAD_DIM))
        h = self._norm(x, self.mlp_norm)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def _decoder() -> Callable[..., Any]:
    torch.manual_seed(0)
    return DecoderLayer().to(device="cuda", dtype=torch.bfloat16).eval()


def _decoder_inputs(length: int) -> tuple[Any, ...]:
    return (torch.randn(1, length, HIDDEN, device="cuda", dtype=torch.bfloat16),)


DECODER = Program("decoder", f"Llama-3-8B-width decoder layer bf16 (hidden {HIDDEN}, MLP {MLP}, "
                             f"{HEADS}/{KV_HEADS} heads), prefill forward",
                  (128, 256, 512, 1024, 1500, 2048, 4096, 6000, 8192), 128, 8192, {0: 1}, _decoder,
                  _decoder_inputs, "kernel_select.offline.serving.programs:decoder_factory")


def decoder_factory() -> tuple[Any, tuple[Any, ...], dict[int, tuple[int, int, int]]]:
    """`kernel-select pretune --model` factory of the decoder layer."""
    return DECODER.build(), DECODER.inputs(2048), {0: (1, DECODER.low, DECODER.high)}


PROGRAMS = {program.name: program for program in (SEED, DECODER)}
