"""The cuBLAS gate: skip Triton autotuning where cuBLAS is predicted to win anyway.

Inductor always benchmarks ATen (cuBLAS) next to the Triton candidates. On 63% of the dataset's
problems cuBLAS beats even the fastest Triton config, yet Inductor still compiles and benchmarks
every Triton candidate there, and its launch-inclusive timing sometimes picks a Triton kernel
that then runs slower than cuBLAS (the issue's "slower than eager" cases). The gate predicts,
per problem, log(cuBLAS time / fastest Triton time); when cuBLAS is predicted to be faster by at
least `margin`, the handler offers Inductor no model-ranked Triton configs (LUT entries are
still offered), so Inductor takes ATen without compiling or benchmarking anything.

The prediction is a small MLP over problem-level features (sizes, alignment, roofline terms),
trained on the dataset's per-problem ratio of the measured cuBLAS row to the measured oracle.
Comparing against the oracle is conservative: the top-k's best Triton config is never faster.

Files: the checkpoint `cublas_gate` of `card.py` (cublas_gate.pt weights, cublas_gate.json card with
the architecture and feature standardization) in models/<device>/, next to the MLP.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.model.card import Architecture, ModelCard, training_versions, utc_now
from kernel_select.layouts import DEFAULT_LAYOUT, check_layout
from kernel_select.model.features import log2_alignment
from kernel_select.model.problem_net import ProblemNetCheckpoint, fit_problem_net
from kernel_select.problem import DTYPE_BYTES, Problem, dtype_name

log = logging.getLogger(__name__)

STEM = "cublas_gate"
GATE_FILE = f"{STEM}.pt"
GATE_CARD_FILE = f"{STEM}.json"
#: Version 2 adds the operand layout: cuBLAS picks other kernels for "nt" and "tn", and the Triton
#: oracle moves with the alignment of each operand's contiguous dimension (features_v4.py).
GATE_FEATURE_VERSION = 2
GATE_V1_FEATURE_NAMES: tuple[str, ...] = (
    "log_m", "log_n", "log_k", "log_dtype_bytes", "log_gflop", "log_gb", "log_flops_per_byte",
    "log2_m_align", "log2_n_align", "log2_k_align", "log_roofline_compute_ms", "log_roofline_memory_ms",
    "log_waves_128x128", "tile_eff_m_128", "tile_eff_n_128", "log_min_mn", "log_k_over_max_mn",
)
GATE_FEATURE_NAMES: tuple[str, ...] = GATE_V1_FEATURE_NAMES + (
    "a_transposed", "b_transposed", "log2_a_contig_align", "log2_b_contig_align",
)
#: version -> feature names: a version-1 card (no layout input) still loads and scores every layout as "nn".
GATE_FEATURE_SETS: dict[int, tuple[str, ...]] = {1: GATE_V1_FEATURE_NAMES, 2: GATE_FEATURE_NAMES}
#: Default margin (the `cublas_margin` knob's default): skip Triton when cuBLAS is predicted >= 15%
#: faster. The rule: the smallest margin of GATE_MARGINS at which no validation problem is gated
#: while a Triton config beats cuBLAS. For the shipped H100 gate (187 validation problems) that is
#: 0.15: 11% gated, none wrongly; at 0.05, 27% gated, 10 of them wrongly (a Triton config faster,
#: by up to 4.1x); at 0.10, 16% gated, 4 wrongly.
DEFAULT_MARGIN = 0.15
#: Below this predicted cuBLAS time (ms, the shipped model's `estimate_aten`), the gate skips Triton
#: wherever it does not predict Triton faster by more than NO_MARGIN_TIE, not only where cuBLAS wins by
#: `margin`: there Inductor's autotune benchmark times the ATen choice 1.03x to 5.6x slower than it runs
#: in the program (torch 2.11 on the H100: every GEMM of the single-GEMM suite under 0.055 ms eager, none
#: from 0.066 ms; results/compare_gemm_only_logs), so a GEMM where cuBLAS is truly faster gets a slower
#: Triton kernel (8.3 us eager, 9.2 us compiled for 16x1024x4096). 0.06 ms sits in that measured
#: boundary; on the dataset's held-out splits it scores at least as high as 0.05 ms and leaves fewer
#: GEMMs slower than cuBLAS in every over-timing scenario simulated (docs/inductor.md, "Small GEMMs").
SMALL_GEMM_MS = 0.06
#: In the no-margin clauses (small GEMMs, bias epilogues) Inductor's benchmark cannot be trusted to fall
#: back to cuBLAS, so the gate decides alone, and a predicted tie goes to cuBLAS (eager's own kernel):
#: Triton is offered only where predicted faster than cuBLAS by more than this fraction, the 2% by which
#: no compiled GEMM may be slower than eager. Llama-3-8B's down projection at M = 1 (predicted ratio
#: 1.002) ran 4.6% slower than eager with a Triton pick; the simulation's cost on `test` is 0.2% of
#: the oracle at k = 4 and its gain on `family` 0.3-0.8% (docs/inductor.md, "Small GEMMs").
NO_MARGIN_TIE = 0.02
#: For an addmm whose bias is one row (a biased nn.Linear: cuBLAS runs it as one cuBLASLt call with the
#: bias in its epilogue, Inductor's `bias_addmm` in torch 2.11), the margin is dropped too (NO_MARGIN_TIE).
#: Inductor's benchmark timed that cuBLASLt epilogue call 1.8x-2.4x its in-program time on GPT-2's
#: projections in some processes (8192 x 3072 x 768: 0.110 ms timed, 0.061 ms by the harness), within
#: 10% in others, so the margin that guards against the gate's
#: own error hands such GEMMs to a slower Triton kernel. Simulated on the H100 dataset's held-out
#: splits (model top-4, Inductor picking the faster of cuBLAS timed at b x its time and the top-4):
#: no margin costs 0.05% (`test`) / 0.2% (`family`) of the oracle where b = 1 and gains 1.0% / 0.9%
#: at b = 1.3 and 1.6% / 1.7% at b = 2 (docs/inductor.md, "Whole models on the H100 (third run)").

#: Where the GEMM feeds a pointwise epilogue that a Triton template fuses and cuBLAS leaves as a
#: kernel of its own (inductor/pointwise_epilogue.py), cuBLAS is charged for that kernel's launch:
#: the shortest kernels in the H100 profiles (a ReLU over 1 x 1024 elements and Inductor's small
#: pointwise kernels, 1.0-1.2 us; results/models_h100_logs/call38). Only the launch: the kernel's
#: second pass over the output is not charged, because the fused epilogue is not free either. Charged
#: with it (1 us + 30 us for GPT-2's 8192 x 3072 GELU), the gate offered Triton for GPT-2's c_fc, and
#: where Inductor took it the step ran 2.5% (prefill) and 1.6% (training) slower than in a process
#: of the same code where Inductor kept cuBLAS and a separate GELU (docs/inductor.md, "Epilogues
#: cuBLAS leaves unfused").
POINTWISE_KERNEL_MS = 0.001
#: ... and only where the GEMM is launch-sized: predicted cuBLAS at most this (the launch at least an
#: eighth of it). Measured new rule against old in one H100 lease: the recommendation tower at batch 1
#: (cuBLAS predicted 5.4-6.5 us on the three GEMMs the charge moved to Triton) ran 0.94x the old
#: device time; GPT-2 decode's c_fc (8.9 us), ViT-B/16's fc1 at batch 1 (9.5 us) and Llama decode's
#: gate/up (54.5 us) went to Triton for no gain (1.001x, 1.010x, 0.997x) and compiled 1.2-1.5x longer.
EPILOGUE_CHARGE_MAX_MS = 0.008
#: The decision rule's name in Inductor cache keys: a changed rule must not reuse old choices.
RULE = (f"small<{SMALL_GEMM_MS}:bias_addmm-no-margin:tie<{1 + NO_MARGIN_TIE}"
        f":epilogue+{POINTWISE_KERNEL_MS}ms<={EPILOGUE_CHARGE_MAX_MS}ms")
#: The margins a gate's validation report covers (the card's metrics.validation.margins).
GATE_MARGINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
#: The network a new gate is trained with; a saved gate rebuilds the one its card describes.
DEFAULT_ARCHITECTURE = Architecture(inputs=len(GATE_FEATURE_NAMES), hidden_widths=[32, 32], activation="silu")


def gate_features(m: Any, n: Any, k: Any, dtype_bytes: Any, device: DeviceSpec,
                  layout: Any = None) -> np.ndarray:
    """Problem-level features, one row per problem (arguments are scalars or 1-D arrays): version 2
    with `layout` (one for all problems, or one each), version 1 without."""
    m, n, k, db = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in (m, n, k, dtype_bytes))
    base = _size_features(m, n, k, db, device)
    if layout is None:
        return base
    layouts = np.broadcast_to(np.asarray(layout, dtype=object), m.shape)
    a_t = np.array([check_layout(str(x))[0] == "t" for x in layouts], dtype=np.float64).reshape(m.shape)
    b_t = np.array([str(x)[1] == "t" for x in layouts], dtype=np.float64).reshape(m.shape)
    # each operand's contiguous dimension (its leading stride): K or M for A, N or K for B
    columns = (a_t, b_t, log2_alignment(np.where(a_t == 1, m, k)), log2_alignment(np.where(b_t == 1, k, n)))
    return np.concatenate([base, np.stack(columns, axis=1).astype(np.float32)], axis=1)


def table_features(table: Any, device: DeviceSpec) -> np.ndarray:
    """Version-2 features of a frame with m, n, k, dtype and (else all "nn") layout columns."""
    layout = table["layout"].astype(str).to_numpy() if "layout" in table.columns else DEFAULT_LAYOUT
    return gate_features(table["m"], table["n"], table["k"],
                         table["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]), device, layout)


def _size_features(m: np.ndarray, n: np.ndarray, k: np.ndarray, db: np.ndarray,
                   device: DeviceSpec) -> np.ndarray:
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
    )
    return np.stack(columns, axis=1).astype(np.float32)


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict for one problem."""

    problem: Problem
    predicted_ratio: float  # predicted cuBLAS time / fastest Triton time (< 1: cuBLAS faster)
    margin: float
    small: bool = False  # predicted cuBLAS time under SMALL_GEMM_MS: no margin (see NO_MARGIN_TIE)
    bias_epilogue: bool = False  # an addmm with a bias row (cuBLAS's epilogue call): no margin either
    #: (cuBLAS time + the launch of the epilogue kernel it needs) / cuBLAS time; 1.0 where there is none
    epilogue_factor: float = 1.0

    @property
    def ratio(self) -> float:
        """What the rule compares: cuBLAS's time, with its separate epilogue kernel where it needs
        one, over the fastest Triton time (a Triton template fuses the epilogue)."""
        return self.predicted_ratio * self.epilogue_factor

    @property
    def charged_epilogue(self) -> bool:
        """Whether cuBLAS was charged for an unfused epilogue kernel."""
        return self.epilogue_factor != 1.0

    @property
    def no_margin(self) -> bool:
        """Whether the margin is dropped (Inductor over-times this cuBLAS call): Triton is then
        skipped unless predicted faster than cuBLAS by more than NO_MARGIN_TIE."""
        return self.small or self.bias_epilogue

    @property
    def prefers_cublas(self) -> bool:
        return (self.ratio <= 1.0 - self.margin
                or (self.no_margin and self.ratio < 1.0 + NO_MARGIN_TIE))

    def describe(self) -> str:
        why = [f"small GEMM (< {SMALL_GEMM_MS} ms)"] if self.small else []
        why += ["cuBLAS as bias_addmm"] if self.bias_epilogue else []
        clause = f", {' and '.join(why)}: no margin, ties to cuBLAS" if why else ""
        epilogue = (f", {self.ratio:.2f} with the pointwise kernel cuBLAS leaves unfused"
                    if self.charged_epilogue else "")
        return (f"cuBLAS gate: predicted cuBLAS / best Triton time {self.predicted_ratio:.2f}{epilogue} "
                f"(margin {self.margin:.2f}{clause}): {verdict(self.prefers_cublas)}")


def make_decision(problem: Problem, predicted_ratio: float, margin: float,
                  predicted_cublas_ms: float | None = None, bias_epilogue: bool = False,
                  separate_epilogue: bool = False) -> GateDecision:
    """The verdict for a predicted cuBLAS / best Triton ratio (arguments as `CublasGate.decide`)."""
    small = predicted_cublas_ms is not None and predicted_cublas_ms < SMALL_GEMM_MS
    charge = epilogue_charge_ms(predicted_cublas_ms) if separate_epilogue else 0.0
    factor = 1.0 + charge / predicted_cublas_ms if charge else 1.0
    return GateDecision(problem=problem, predicted_ratio=predicted_ratio, margin=margin, small=small,
                        bias_epilogue=bias_epilogue, epilogue_factor=factor)


def epilogue_charge_ms(predicted_cublas_ms: float | None) -> float:
    """What cuBLAS is charged for a pointwise epilogue it leaves unfused: POINTWISE_KERNEL_MS where
    its predicted time is launch-sized (EPILOGUE_CHARGE_MAX_MS), else nothing."""
    if predicted_cublas_ms is None or not 0 < predicted_cublas_ms <= EPILOGUE_CHARGE_MAX_MS:
        return 0.0
    return POINTWISE_KERNEL_MS


def verdict(prefers_cublas: bool) -> str:
    """What a cuBLAS decision means for Inductor, in words."""
    return ("skip the model's Triton picks, benchmark ATen and any LUT entries" if prefers_cublas
            else "benchmark Triton configs")


class CublasGate(ProblemNetCheckpoint):
    """Predicts whether cuBLAS beats every Triton config of a problem (see the module docstring)."""

    STEM = STEM
    WHAT = "cuBLAS gate"

    def predict_log_ratio(self, problems: Sequence[Problem]) -> np.ndarray:
        """log(cuBLAS time / fastest Triton time) per problem."""
        return self._outputs(problems)

    def skips_triton(self, problems: Sequence[Problem], margin: float = DEFAULT_MARGIN) -> np.ndarray:
        """Per problem, whether cuBLAS is predicted faster by at least `margin` (Triton skipped)."""
        return self.predict_log_ratio(problems) <= math.log(1.0 - margin)

    def decide(self, problem: Problem, margin: float = DEFAULT_MARGIN,
               predicted_cublas_ms: float | None = None, bias_epilogue: bool = False,
               separate_epilogue: bool = False) -> GateDecision:
        """The verdict at `margin`; `predicted_cublas_ms` (the model's cuBLAS time, when it has
        one) marks GEMMs under SMALL_GEMM_MS, and `bias_epilogue` an addmm whose bias is one row
        (see RULE): there the margin is dropped. `separate_epilogue`: the GEMM feeds a pointwise
        epilogue that beside cuBLAS is a kernel of its own; cuBLAS is then charged for its launch
        where `predicted_cublas_ms` is launch-sized (`epilogue_charge_ms`)."""
        ratio = float(np.exp(self.predict_log_ratio([problem])[0]))
        return make_decision(problem, ratio, margin, predicted_cublas_ms, bias_epilogue, separate_epilogue)

    def digest(self) -> str:
        """Identifies the weights (for Inductor cache keys)."""
        h = hashlib.sha256()
        for tensor in self.net.state_dict().values():
            h.update(tensor.detach().cpu().numpy().tobytes())
        h.update(self.mean.tobytes() + self.std.tobytes())
        return h.hexdigest()[:16]


def load_default_gate(device: DeviceSpec | str | None = None) -> CublasGate | None:
    """The shipped gate for `device` (None: the local GPU), or None when models/<device>/ (or a
    same-architecture device's folder) has none."""
    from kernel_select.device import resolve
    from kernel_select.model.base import shipped_model_dir

    spec = resolve(device)
    found = shipped_model_dir(spec, STEM)
    if found is None:
        return None
    return CublasGate.load(found[0], spec, allow_same_architecture=True)


# -- training ------------------------------------------------------------------------------------

def problem_ratios(df: Any) -> Any:
    """Per problem of a dataset frame: m, n, k, dtype, split, layout and log(cuBLAS ms / Triton oracle ms).

    Problems without a finite cuBLAS row or without a finite Triton row are left out.
    """
    import pandas as pd

    finite = df[np.isfinite(df["runtime_ms"]) & (df["runtime_ms"] > 0)]
    aten = finite[finite["backend"] == "aten"].groupby("problem_id")["runtime_ms"].min()
    triton = finite[finite["backend"] == "triton"].groupby("problem_id")["runtime_ms"].min()
    meta = df.groupby("problem_id")[["m", "n", "k", "dtype", "split", "layout"]].first()
    both = pd.concat({"aten": aten, "triton": triton}, axis=1, join="inner")
    out = meta.join(both, how="inner")
    out["log_ratio"] = np.log(out["aten"] / out["triton"])
    return out.drop(columns=["aten", "triton"])


def problems_of(table: Any) -> list[Problem]:
    """The Problems of a frame with m, n, k, dtype and (else all "nn") layout columns, in row order."""
    columns = table.reindex(columns=["m", "n", "k", "dtype", "layout"], fill_value=DEFAULT_LAYOUT)
    return [Problem(int(m), int(n), int(k), str(d), layout=str(layout))
            for m, n, k, d, layout in columns.itertuples(index=False, name=None)]


def fit_gate(df: Any, device: DeviceSpec | str, *, seed: int = 0, epochs: int = 1500,
             check_every: int = 10) -> CublasGate:
    """Train the gate on the 'train' split's problems; keep the weights with the lowest validation
    RMSE (checked every `check_every` epochs). Full-batch AdamW: a few hundred problems."""
    spec = get_device(device)
    table = problem_ratios(df)
    train, val = table[table["split"] == "train"], table[table["split"] == "val"]
    if len(train) < 10 or len(val) < 5:
        raise ModelError(f"cuBLAS gate: need >= 10 train and >= 5 validation problems with a cuBLAS row, "
                         f"got {len(train)} and {len(val)}")

    fitted = fit_problem_net(table_features(train, spec), train["log_ratio"].to_numpy(),
                             table_features(val, spec),
                             val["log_ratio"].to_numpy(), DEFAULT_ARCHITECTURE, seed=seed, epochs=epochs,
                             check_every=check_every)
    net, mean, std, best_rmse, best_epoch = (fitted.net, fitted.mean, fitted.std, fitted.val_rmse,
                                             fitted.best_epoch)
    card = ModelCard(
        model=STEM, device=spec.key, architecture=DEFAULT_ARCHITECTURE, feature_version=GATE_FEATURE_VERSION,
        feature_names=list(GATE_FEATURE_NAMES), feature_mean=mean.tolist(), feature_std=std.tolist(),
        dtypes=sorted({dtype_name(d) for d in table["dtype"]}),
        hyperparameters={"seed": seed, "epochs": epochs, "check_every": check_every, "lr": 1e-2,
                         "weight_decay": 1e-2},
        metrics={"train_problems": len(train), "val_problems": len(val), "best_epoch": best_epoch,
                 "val_rmse_log_ratio": best_rmse},
        trained_at=utc_now(), versions=training_versions())
    gate = CublasGate(spec, net, card)
    card.metrics["validation"] = gate_metrics(gate, val)
    return gate



def gate_metrics(gate: CublasGate, table: Any, margins: Sequence[float] = GATE_MARGINS) -> dict[str, Any]:
    """How the gate decides on the problems of `table` (rows from `problem_ratios`), per margin.

    gated: fraction of problems where Triton is skipped; wrongly_gated: of those, how many had a
    Triton config faster than cuBLAS; loss_*: measured cuBLAS / best-of-(cuBLAS, Triton oracle)
    over the gated problems (1.0 = nothing lost).
    """
    problems = problems_of(table)
    predicted = gate.predict_log_ratio(problems)
    truth = table["log_ratio"].to_numpy()
    out: dict[str, Any] = {"problems": len(problems),
                           "sign_accuracy": float(np.mean((predicted < 0) == (truth < 0))),
                           "rmse_log_ratio": float(np.sqrt(np.mean((predicted - truth) ** 2))),
                           "margins": {}}
    for margin in margins:
        gated = gate.skips_triton(problems, margin)
        loss = np.exp(np.maximum(truth[gated], 0.0))
        out["margins"][f"{margin:g}"] = {
            "gated": float(gated.mean()), "wrongly_gated": int((truth[gated] > 0).sum()),
            "loss_geomean": float(np.exp(np.mean(np.log(loss)))) if gated.any() else 1.0,
            "loss_worst": float(loss.max()) if gated.any() else 1.0,
        }
    return out
