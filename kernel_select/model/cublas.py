"""The cuBLAS decision: whether a GEMM gets Triton candidates at all, or goes to cuBLAS untuned.

Inductor always benchmarks ATen (cuBLAS) next to the Triton candidates. On 63% of the H100
dataset's problems cuBLAS beats even the fastest Triton config, yet Inductor compiles and benchmarks
every Triton candidate there, and its launch-inclusive benchmark sometimes picks a Triton kernel
that then runs slower than cuBLAS. So `select()` makes one decision per GEMM from one predicted
ratio, cuBLAS time / fastest Triton time:

  gate    a small network trained on each problem's measured cuBLAS time over its Triton oracle
          (`CublasGate`); used wherever one is shipped for the device or its architecture
  model   otherwise, the performance model's own cuBLAS time (`AtenHead`, `estimate_aten`) over
          its best predicted Triton time

and one rule (`CublasDecision.prefers_cublas`): skip Triton where cuBLAS is predicted faster by at
least `margin`. With one choice per GEMM (`alone`: gemm_topk=1, nothing benchmarked) there is no
margin: cuBLAS where it is predicted faster (ONE_CHOICE_THRESHOLD), else the model's first config.
Where Inductor's own benchmark cannot be trusted to fall back to cuBLAS (GEMMs
predicted under SMALL_GEMM_MS, and biased nn.Linear layers cuBLAS runs with the bias in its
epilogue), the margin is dropped and a predicted tie goes to cuBLAS. A pointwise epilogue that a
Triton template fuses but cuBLAS leaves as a kernel of its own charges cuBLAS that kernel's launch.
docs/design.md ("The cuBLAS decision") gives the measurements behind each constant.

Both networks are problem-level: one row of `problem_features` per GEMM (sizes, alignment,
rooflines, operand layout), no config. Files: the checkpoints `aten` and `cublas_gate` of checkpoint.py in
models/<device>/, next to the MLP's. Training lives in kernel_select.offline.training.cublas_fit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.layouts import a_transposed, b_transposed
from kernel_select.model.card import ModelCard
from kernel_select.model.checkpoint import build_body, load_checkpoint, load_network, retrain_hint
from kernel_select.model.features import log2_alignment
from kernel_select.options import DEFAULT_CUBLAS_MARGIN
from kernel_select.problem import Problem

GATE_STEM = "cublas_gate"
#: The gate's network for batched GEMMs (bmm, baddbmm), a checkpoint of its own beside the gate's: the
#: same features with log(batch) added. One network for both lost score on single GEMMs
#: (results/bmm_gate_h200.json), so each kind of GEMM has its own, and `CublasGate` asks the one for
#: the problem.
BATCHED_GATE_STEM = "cublas_gate_bmm"
ATEN_STEM = "aten"
#: Version 2 of the problem features adds the operand layout: cuBLAS picks other kernels for "nt"
#: and "tn", and the Triton oracle moves with each operand's contiguous dimension's alignment.
PROBLEM_FEATURE_VERSION = 2
PROBLEM_FEATURE_NAMES: tuple[str, ...] = (
    "log_m", "log_n", "log_k", "log_dtype_bytes", "log_gflop", "log_gb", "log_flops_per_byte",
    "log2_m_align", "log2_n_align", "log2_k_align", "log_roofline_compute_ms", "log_roofline_memory_ms",
    "log_waves_128x128", "tile_eff_m_128", "tile_eff_n_128", "log_min_mn", "log_k_over_max_mn",
    "a_transposed", "b_transposed", "log2_a_contig_align", "log2_b_contig_align",
)
#: The batched gate's features: the problem's, per matrix of the batch, and how many there are.
BATCHED_FEATURE_NAMES: tuple[str, ...] = (*PROBLEM_FEATURE_NAMES, "log_batch")

#: The `gemm_cublas_margin` knob's default (kernel_select.options says how it was chosen).
DEFAULT_MARGIN = DEFAULT_CUBLAS_MARGIN
#: Below this predicted cuBLAS time (ms) the margin is dropped: Inductor's autotune benchmark times
#: ATen 1.03x-5.6x slower than it runs in the program for every GEMM of the single-GEMM suite under
#: 0.055 ms eager and none from 0.066 ms (torch 2.11, H100), so a GEMM where cuBLAS is truly faster
#: would get a slower Triton kernel.
SMALL_GEMM_MS = 0.06
#: Where the margin is dropped, Triton is offered only where predicted faster than cuBLAS by more than
#: this fraction: a predicted tie goes to eager's own kernel. Llama-3-8B's down projection at M = 1
#: (predicted ratio 1.002) ran 4.6% slower than eager with a Triton pick.
NO_MARGIN_TIE = 0.02
#: The launch of a pointwise kernel cuBLAS leaves unfused (a ReLU over 1 x 1024 elements, 1.0-1.2 us
#: in H100 profiles). Only the launch: charged with its second pass over the output too, the rule
#: sent GPT-2's c_fc to a fused Triton kernel that stepped 2.5% (prefill) and 1.6% (training) slower.
POINTWISE_KERNEL_MS = 0.001
#: ... charged only where cuBLAS is launch-sized (predicted at most this): on the H100 the charge
#: gained 6% device time at 5.4-6.5 us GEMMs and nothing, at longer compiles, from 8.9 us up.
EPILOGUE_CHARGE_MAX_MS = 0.008
#: With one choice per GEMM (gemm_topk=1) no benchmark stands behind the decision, so there is no margin:
#: cuBLAS is taken where its predicted ratio (epilogue charged) is below this, else the model's first
#: config. Replayed on the H100's single GEMMs (`kernel-select gate-rules --one-choice`), 1.0 had the
#: least regret against the faster of the two on `val` (1.0419) and `test` (1.0420; 1.02: 1.0430, 1.05:
#: 1.0421, 0.95: 1.0490); docs/results.md, "Zero-benchmark mode: the cuBLAS decision alone".
ONE_CHOICE_THRESHOLD = 1.0
#: The rule's name in Inductor cache keys: a changed rule must not reuse old choices. (A hedge, offering
#: the model's first pick beside cuBLAS in a close call, was replayed on the held-out splits and lost
#: score: docs/results.md, "The cuBLAS decision's small-GEMM rule and the hedge". There is none.)
RULE = (f"small<{SMALL_GEMM_MS}:bias_addmm-no-margin:tie<{1 + NO_MARGIN_TIE}"
        f":epilogue+{POINTWISE_KERNEL_MS}ms<={EPILOGUE_CHARGE_MAX_MS}ms:alone<{ONE_CHOICE_THRESHOLD}")


@dataclass(frozen=True)
class Epilogue:
    """What runs after the GEMM in the graph being lowered, as far as the cuBLAS decision cares."""

    #: an addmm whose bias is one row (a biased nn.Linear): cuBLAS runs it as one cuBLASLt call with
    #: the bias in its epilogue, which Inductor's benchmark over-times by 1.8x-2.4x in some processes
    bias_row: bool = False
    #: consumers that beside cuBLAS are a pointwise kernel of their own, fused into a Triton template
    separate_pointwise: bool = False


@dataclass(frozen=True)
class CublasDecision:
    """The cuBLAS-or-Triton verdict for one GEMM."""

    predicted_ratio: float  # predicted cuBLAS time / fastest Triton time (< 1: cuBLAS faster)
    source: Literal["gate", "model"]  # which prediction the ratio comes from (module docstring)
    margin: float
    small: bool = False  # predicted cuBLAS time under SMALL_GEMM_MS: no margin
    bias_epilogue: bool = False  # Epilogue.bias_row: no margin either
    #: (cuBLAS time + the launch of the epilogue kernel it leaves unfused) / cuBLAS time; 1.0 if none
    epilogue_factor: float = 1.0
    #: the one choice Inductor gets (gemm_topk=1): no benchmark behind the verdict, so no margin and no
    #: over-timing rule, only which of cuBLAS and the model's first config is predicted faster
    alone: bool = False

    @property
    def ratio(self) -> float:
        """What the rule compares: cuBLAS's time, with its separate epilogue kernel where it needs
        one, over the fastest Triton time (a Triton template fuses the epilogue)."""
        return self.predicted_ratio * self.epilogue_factor

    @property
    def charged_epilogue(self) -> bool:
        return self.epilogue_factor != 1.0

    @property
    def no_margin(self) -> bool:
        """Whether Inductor over-times this cuBLAS call, so the margin is dropped."""
        return self.small or self.bias_epilogue

    @property
    def prefers_cublas(self) -> bool:
        if self.alone:
            return self.ratio < ONE_CHOICE_THRESHOLD
        return self.ratio <= 1.0 - self.margin or (self.no_margin and self.ratio < 1.0 + NO_MARGIN_TIE)

    def describe(self) -> str:
        epilogue = (f", {self.ratio:.2f} with the pointwise kernel cuBLAS leaves unfused"
                    if self.charged_epilogue else "")
        if self.alone:
            verdict = "ATen (cuBLAS)" if self.prefers_cublas else "the model's first Triton config"
            return (f"cuBLAS decision ({self.source}), one choice: predicted cuBLAS / best Triton time "
                    f"{self.predicted_ratio:.2f}{epilogue} (cuBLAS below {ONE_CHOICE_THRESHOLD:g}): "
                    f"{verdict}, nothing benchmarked")
        why = [f"small GEMM (< {SMALL_GEMM_MS} ms)"] if self.small else []
        why += ["cuBLAS as bias_addmm"] if self.bias_epilogue else []
        clause = f", {' and '.join(why)}: no margin, ties to cuBLAS" if why else ""
        verdict = ("skip the model's Triton picks, benchmark ATen and any LUT entries" if self.prefers_cublas
                   else "benchmark Triton configs")
        return (f"cuBLAS decision ({self.source}): predicted cuBLAS / best Triton time "
                f"{self.predicted_ratio:.2f}{epilogue} (margin {self.margin:.2f}{clause}): {verdict}")


def decide(predicted_ratio: float, source: Literal["gate", "model"], margin: float,
           predicted_cublas_ms: float | None, epilogue: Epilogue = Epilogue(), *,
           alone: bool = False) -> CublasDecision:
    """The verdict for a predicted cuBLAS / fastest Triton ratio. `predicted_cublas_ms` (the model's
    cuBLAS time, where it has one) marks small GEMMs and sizes the epilogue charge; `alone`: the
    verdict is the one choice Inductor gets (`CublasDecision.alone`)."""
    small = predicted_cublas_ms is not None and predicted_cublas_ms < SMALL_GEMM_MS
    charge = epilogue_charge_ms(predicted_cublas_ms) if epilogue.separate_pointwise else 0.0
    factor = 1.0 + charge / predicted_cublas_ms if charge and predicted_cublas_ms else 1.0
    return CublasDecision(predicted_ratio=float(predicted_ratio), source=source, margin=margin, small=small,
                          bias_epilogue=epilogue.bias_row, epilogue_factor=factor, alone=alone)


def epilogue_charge_ms(predicted_cublas_ms: float | None) -> float:
    """What cuBLAS is charged for a pointwise epilogue it leaves unfused: POINTWISE_KERNEL_MS where
    its predicted time is launch-sized (EPILOGUE_CHARGE_MAX_MS), else nothing."""
    if predicted_cublas_ms is None or not 0 < predicted_cublas_ms <= EPILOGUE_CHARGE_MAX_MS:
        return 0.0
    return POINTWISE_KERNEL_MS


# -- the problem-level networks -----------------------------------------------------------------------

class MemberMean(torch.nn.Module):
    """Several networks of one shape, fitted from different seeds on the same rows: their mean output.
    One 32 x 32 gate is a high-variance estimate where the data are thin: four seeds fitted on the same
    H200 problems predicted GPT-2's padded LM head at 0.71-1.02 of cuBLAS / Triton (measured 0.79), and
    their mean decided the held-out splits better than the one seed shipped before it on all three
    (docs/results.md, "The cuBLAS gate, four seeds averaged")."""

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        self.members = torch.nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(x) for member in self.members]).mean(dim=0)


def build_problem_net(architecture) -> torch.nn.Module:  # noqa: ANN001 -- a card.Architecture
    """The (untrained) network a problem net's card describes: one body, or the mean of `members`."""
    if architecture.members == 1:
        return build_body(architecture)
    return MemberMean([build_body(architecture) for _ in range(architecture.members)])


def problem_features(m, n, k, dtype_bytes, a_t, b_t, device: DeviceSpec, batch=None) -> np.ndarray:
    """float32 (problems, len(PROBLEM_FEATURE_NAMES)); arguments are 1-D arrays (or scalars) over
    problems, a_t / b_t 0 or 1 (operand stored transposed). With `batch` (per problem), one more
    column: BATCHED_FEATURE_NAMES."""
    m, n, k, db, a_t, b_t = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in (m, n, k, dtype_bytes,
                                                                                       a_t, b_t))
    m, n, k, db, a_t, b_t = np.broadcast_arrays(m, n, k, db, a_t, b_t)
    flops = 2.0 * m * n * k
    nbytes = (m * k + k * n + m * n) * db
    peak = np.where(db == 2, device.peak_flops("bfloat16"), device.peak_flops("float32"))
    tiles_m, tiles_n = np.ceil(m / 128), np.ceil(n / 128)
    columns = (
        np.log(m), np.log(n), np.log(k), np.log(db), np.log(flops / 1e9), np.log(nbytes / 1e9),
        np.log(flops / nbytes), log2_alignment(m), log2_alignment(n), log2_alignment(k),
        np.log(flops / peak * 1e3), np.log(nbytes / device.hbm_bytes_per_s * 1e3),
        np.log(tiles_m * tiles_n / device.sm_count), m / (tiles_m * 128), n / (tiles_n * 128),
        np.log(np.minimum(m, n)), np.log(k / np.maximum(m, n)),
        # each operand's contiguous dimension (its leading stride): K or M for A, N or K for B
        a_t, b_t, log2_alignment(np.where(a_t == 1, m, k)), log2_alignment(np.where(b_t == 1, k, n)),
    )
    if batch is not None:
        columns += (np.log(np.broadcast_to(np.asarray(batch, dtype=np.float64), m.shape)),)
    return np.stack(columns, axis=1).astype(np.float32)


class ProblemNet:
    """A trained problem-level network over `problem_features`, saved as checkpoint `STEM`."""

    STEM = ""  # the checkpoint's file stem and card `model`
    WHAT = ""  # for error messages: "cuBLAS gate", ...
    FEATURE_NAMES = PROBLEM_FEATURE_NAMES  # what it reads: BATCHED_FEATURE_NAMES adds the batch

    def __init__(self, device: DeviceSpec | str, net: torch.nn.Module, card: ModelCard) -> None:
        self.device = get_device(device)
        self.net = net.eval()
        self.card = card
        self.mean = np.asarray(card.feature_mean, dtype=np.float32)
        self.std = np.asarray(card.feature_std, dtype=np.float32)

    def outputs(self, problems: Sequence[Problem]) -> np.ndarray:
        """The network's output per problem, float64; a non-finite one is a ModelError."""
        if not problems:
            return np.zeros(0)
        x = problem_features([p.m for p in problems], [p.n for p in problems], [p.k for p in problems],
                             [p.dtype_bytes for p in problems],
                             [a_transposed(p.layout) for p in problems],
                             [b_transposed(p.layout) for p in problems], self.device,
                             batch=[p.batch for p in problems] if self.sees_batch else None)
        with torch.inference_mode():
            out = self.net(torch.from_numpy((x - self.mean) / self.std)).squeeze(1).double().numpy()
        if not np.all(np.isfinite(out)):
            raise ModelError(f"{self.WHAT} for {self.device.key} returned non-finite predictions")
        return out

    @property
    def sees_batch(self) -> bool:
        return self.FEATURE_NAMES == BATCHED_FEATURE_NAMES

    def digest(self) -> str:
        """Identifies the weights (for Inductor cache keys)."""
        h = hashlib.sha256()
        for tensor in self.net.state_dict().values():
            h.update(tensor.detach().cpu().numpy().tobytes())
        h.update(self.mean.tobytes() + self.std.tobytes())
        return h.hexdigest()[:16]

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str, *, allow_same_architecture: bool = False):
        """Raises ModelError naming the file when it is missing, unreadable or for another device."""
        spec = get_device(device)
        model_dir = Path(model_dir)
        hint = retrain_hint(model_dir, spec.key)
        state, card = load_checkpoint(model_dir, cls.STEM, spec, model=cls.STEM,
                                      feature_version=PROBLEM_FEATURE_VERSION,
                                      feature_names=cls.FEATURE_NAMES,
                                      allow_same_architecture=allow_same_architecture)
        net = load_network(lambda: build_problem_net(card.architecture), state, model_dir / f"{cls.STEM}.pt",
                           card, hint)
        return cls(spec, net, card)


class BatchedGate(ProblemNet):
    """The gate's network for batched GEMMs: log(cuBLAS time / fastest Triton time) from the problem's
    features and its batch. Served as `CublasGate.batched`."""

    STEM = BATCHED_GATE_STEM
    WHAT = "cuBLAS gate for batched GEMMs"
    FEATURE_NAMES = BATCHED_FEATURE_NAMES

    def supports(self, problem: Problem) -> bool:
        """Batched GEMMs without TF32, what it was trained on."""
        return problem.op in ("bmm", "baddbmm") and not problem.tf32

    def predict_log_ratio(self, problems: Sequence[Problem]) -> np.ndarray:
        return self.outputs(problems)


class CublasGate(ProblemNet):
    """Predicts log(cuBLAS time / fastest Triton time) per problem: single GEMMs with its own network,
    batched ones with `batched` (BatchedGate) where the folder holds one."""

    STEM = GATE_STEM
    WHAT = "cuBLAS gate"

    def __init__(self, device: DeviceSpec | str, net: torch.nn.Module, card: ModelCard,
                 batched: BatchedGate | None = None) -> None:
        super().__init__(device, net, card)
        self.batched = batched

    def supports(self, problem: Problem) -> bool:
        """Single GEMMs without TF32, what its network was trained on (its features see neither a
        batch nor TF32), and batched GEMMs where it has a network for them."""
        if self.batched is not None and self.batched.supports(problem):
            return True
        return problem.batch == 1 and problem.op in ("mm", "addmm") and not problem.tf32

    def predict_log_ratio(self, problems: Sequence[Problem]) -> np.ndarray:
        """Per problem, from the network for its kind (callers check `supports` first)."""
        if self.batched is None:
            return self.outputs(problems)
        batched = np.array([self.batched.supports(p) for p in problems], dtype=bool)
        out = np.zeros(len(problems))
        if batched.any():
            out[batched] = self.batched.outputs([p for p, b in zip(problems, batched) if b])
        if not batched.all():
            out[~batched] = self.outputs([p for p, b in zip(problems, batched) if not b])
        return out

    def digest(self) -> str:
        own = super().digest()
        return own if self.batched is None else f"{own}+{self.batched.digest()}"

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str, *, allow_same_architecture: bool = False):
        """The gate and, where the folder holds it whole (.pt and .json), its batched network."""
        gate = super().load(model_dir, device, allow_same_architecture=allow_same_architecture)
        folder = Path(model_dir)
        if all((folder / f"{BATCHED_GATE_STEM}{suffix}").is_file() for suffix in (".pt", ".json")):
            gate.batched = BatchedGate.load(folder, device, allow_same_architecture=allow_same_architecture)
        return gate

    def skips_triton(self, problems: Sequence[Problem], margin: float = DEFAULT_MARGIN) -> np.ndarray:
        """Per problem, whether cuBLAS is predicted faster by at least `margin` (the plain rule)."""
        return skips_triton_at(self.predict_log_ratio(problems), margin)


def skips_triton_at(log_ratio: np.ndarray, margin: float) -> np.ndarray:
    """The plain rule on predicted log(cuBLAS / fastest Triton time): cuBLAS faster by at least `margin`."""
    return np.asarray(log_ratio) <= math.log(1.0 - margin)


class AtenHead(ProblemNet):
    """Predicted cuBLAS (ATen mm) milliseconds per problem, for the dtypes it was trained on."""

    STEM = ATEN_STEM
    WHAT = "cuBLAS time head"

    def supports(self, problem: Problem) -> bool:
        """Single GEMMs (batch 1) of a trained dtype: `mm`, what the cuBLAS rows measured, and
        `addmm`, which the handler hands cuBLAS as `bias_addmm`: the same GEMM with the bias added
        in cuBLASLt's epilogue, N more elements read. Not TF32: it was trained on cuBLAS rows without it."""
        return (problem.op in ("mm", "addmm") and problem.batch == 1 and not problem.tf32
                and problem.dtype in self.card.dtypes)

    def predict_ms(self, problems: Sequence[Problem]) -> np.ndarray:
        """float64 ms per problem (callers check `supports` first)."""
        return np.exp(self.outputs(problems))
