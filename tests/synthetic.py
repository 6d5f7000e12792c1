"""A synthetic benchmark dataset with a known, roofline-like runtime for fast CPU tests.

The runtime of a config is the slower of a compute term (padded FLOPs over waves of CTAs, slowed
by a mismatch between warps and tile size and by shallow pipelines) and a memory term (the bytes
the tiling re-reads), plus a launch overhead and a little multiplicative noise. It is not a GPU,
but it has the structure a model must learn: tile padding, wave quantization, and per-config
efficiency that differs from problem to problem.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kernel_select.offline.data.problem_ids import problem_id
from kernel_select.offline.data.splits import split_of
from kernel_select.device import get_device
from kernel_select.problem import Problem
from kernel_select.space import for_problem

DEVICE = get_device("h100")


def synthetic_runtime_ms(m: int, n: int, k: int, bm, bn, bk, stages, warps, dtype_bytes: int = 2):
    """Runtime in ms of configs (numpy arrays) on one problem."""
    tiles = np.ceil(m / bm) * np.ceil(n / bn)
    k_iters = np.ceil(k / bk)
    waves = np.ceil(tiles / DEVICE.sm_count)
    per_sm_flops = DEVICE.peak_flops_bf16 / DEVICE.sm_count
    ideal_warps = np.clip(bm * bn / 2048, 2, 8)
    inefficiency = (1 + 0.35 * np.abs(np.log2(warps / ideal_warps)) + 0.6 / stages
                    + 0.3 * (32 / np.minimum(bk, 128)))
    compute_ms = waves * 2 * bm * bn * bk * k_iters / per_sm_flops * inefficiency * 1e3
    tiled_bytes = (m * k * np.ceil(n / bn) + k * n * np.ceil(m / bm) + m * n) * dtype_bytes
    memory_ms = tiled_bytes / DEVICE.hbm_bytes_per_s * 1e3
    return np.maximum(compute_ms, memory_ms) + 0.004


def synthetic_frame(problems_per_split: dict[str, int] | None = None, configs_per_problem: int = 160,
                    seed: int = 0, noise: float = 0.02) -> pd.DataFrame:
    """A valid dataset frame: log-uniform problems until each split has its quota."""
    quota = dict(problems_per_split or {"train": 16, "val": 4, "test": 4})
    rng = np.random.default_rng(seed)
    frames = []
    while any(quota.values()):
        m, n, k = (int(math.exp(rng.uniform(math.log(16), math.log(8192)))) for _ in range(3))
        pid = problem_id(m, n, k, "bfloat16")
        split = split_of(pid)
        if quota.get(split, 0) == 0:
            continue
        quota[split] -= 1
        frames.append(_problem_rows(m, n, k, pid, split, configs_per_problem, rng, noise))
    return pd.concat(frames, ignore_index=True)


def _problem_rows(m, n, k, pid, split, count, rng, noise) -> pd.DataFrame:
    configs = for_problem(Problem(m, n, k, "bfloat16"), DEVICE)
    chosen = sorted(rng.choice(len(configs), size=min(count, len(configs)), replace=False))
    keys = np.array([configs[i].key for i in chosen])
    runtime = synthetic_runtime_ms(m, n, k, *(keys[:, j].astype(np.float64) for j in range(5)))
    runtime *= np.exp(rng.normal(0, noise, len(runtime)))
    status = np.where(rng.random(len(runtime)) < 0.02, "out_of_resources", "ok")
    runtime = np.where(status == "ok", runtime, np.inf)
    triton = pd.DataFrame({
        "backend": "triton", "block_m": keys[:, 0], "block_n": keys[:, 1], "block_k": keys[:, 2],
        "num_stages": keys[:, 3], "num_warps": keys[:, 4], "group_m": keys[:, 5],
        "even_k": k % keys[:, 2] == 0, "runtime_ms": runtime, "status": status,
    })
    # cuBLAS: about as fast as the best Triton config, sometimes faster
    aten = pd.DataFrame({"backend": ["aten"], "block_m": [0], "block_n": [0], "block_k": [0],
                         "num_stages": [0], "num_warps": [0], "group_m": [0], "even_k": [False],
                         "runtime_ms": [float(np.min(runtime)) * rng.uniform(0.85, 1.15)],
                         "status": ["ok"]})
    rows = pd.concat([triton, aten], ignore_index=True)
    rows["runtime_min_ms"] = rows["runtime_ms"] * 0.98
    rows = rows.assign(
        problem_id=pid, m=m, n=n, k=k, batch=1, dtype="bfloat16", op="mm", layout="nn",
        allow_tf32=False, n_runs=10, error="", split=split, device_name=DEVICE.name,
        sm_count=DEVICE.sm_count, torch_version="2.11.0", triton_version="3.6.0", git_sha="synthetic",
        timestamp="2026-01-01T00:00:00Z", timing_method="synthetic")
    return rows


def untrained_mlp(hidden_widths=(16, 16), seed: int = 0, device: str = "h100",
                  feature_version: int | None = None, members: int = 1):
    """An MLPModel with small random weights and identity standardization (for contract tests), with
    the features new trainings use unless `feature_version` names another of FEATURE_SETS."""
    import torch

    from kernel_select.model.card import ModelCard
    from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
    from kernel_select.model.mlp import MLPModel, architecture, build_net

    torch.manual_seed(seed)
    feature_version = FEATURE_VERSION if feature_version is None else feature_version
    names = FEATURE_SETS[feature_version]
    arch = architecture(len(names), hidden_widths, members)
    net = build_net(arch)
    card = ModelCard(model="mlp", device=device, feature_version=feature_version, feature_names=list(names),
                     feature_mean=[0.0] * len(names), feature_std=[1.0] * len(names), architecture=arch,
                     kernel_overhead_ms=net.kernel_overhead_ms, dtypes=["bfloat16", "float16"],
                     hyperparameters={"seed": seed})
    return MLPModel(device, net, card)


def untrained_problem_net(kind, device: str = "h100", seed: int = 0, dtypes=("bfloat16", "float16")):
    """A cuBLAS gate or cuBLAS time head (`kind`: CublasGate or AtenHead of model/cublas.py) with small
    random weights and identity standardization, as `fit_gate` / `fit_aten` would shape it."""
    import torch

    from kernel_select.model.card import Architecture, ModelCard
    from kernel_select.model.checkpoint import build_body
    from kernel_select.model.cublas import PROBLEM_FEATURE_NAMES, PROBLEM_FEATURE_VERSION

    torch.manual_seed(seed)
    names = list(PROBLEM_FEATURE_NAMES)
    arch = Architecture(inputs=len(names), hidden_widths=[8], activation="silu")
    card = ModelCard(model=kind.STEM, device=device, architecture=arch,
                     feature_version=PROBLEM_FEATURE_VERSION, feature_names=names,
                     feature_mean=[0.0] * len(names), feature_std=[1.0] * len(names), dtypes=list(dtypes),
                     hyperparameters={"seed": seed})
    return kind(device, build_body(arch), card)


def constant_gate(ratio: float, device: str = "h100"):
    """A real CublasGate whose network predicts cuBLAS / best Triton time = `ratio` for every problem
    (to float32 precision): its last layer's weights are zero and its bias log(ratio)."""
    import math

    import torch

    from kernel_select.model.cublas import CublasGate

    gate = untrained_problem_net(CublasGate, device=device)
    last = gate.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(math.log(ratio))
    return gate


def random_gbdt(trees: int = 400, leaves: int = 63, max_depth: int = 12, seed: int = 0, device: str = "h100"):
    """A GBDTModel of `trees` random trees of `leaves` leaves, each split on a random feature at a value
    that feature takes in the seed problem's space, so rows spread over the leaves as a fitted model's
    do (what the speed benchmark needs: the walk's cost depends on the shape, not on the values)."""
    from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION, featurize
    from kernel_select.model.gbdt import GBDTCard, GBDTModel
    from kernel_select.model.trees import TreeEnsemble

    rng = np.random.default_rng(seed)
    seed_problem = Problem(560, 1280, 3420, "bfloat16")
    x = featurize(seed_problem, for_problem(seed_problem, device), get_device(device))
    varying = np.flatnonzero(x.min(axis=0) < x.max(axis=0))

    def grow(rows: np.ndarray, depth: int, budget: int) -> tuple[dict, int]:
        if budget <= 1 or depth == max_depth or len(rows) < 2:
            return {"leaf_value": float(rng.normal(0, 0.01))}, 1
        feature = int(rng.choice(varying))
        values = np.unique(x[rows, feature])
        if len(values) < 2:
            return {"leaf_value": float(rng.normal(0, 0.01))}, 1
        threshold = float(values[rng.integers(len(values) - 1)])
        go_left = x[rows, feature] <= threshold
        left, used = grow(rows[go_left], depth + 1, budget // 2)
        right, used_right = grow(rows[~go_left], depth + 1, budget - used)
        return {"split_feature": feature, "threshold": threshold, "decision_type": "<=",
                "missing_type": "None", "left_child": left, "right_child": right}, used + used_right

    names = FEATURE_SETS[FEATURE_VERSION]
    ensemble = TreeEnsemble.from_nested([grow(np.arange(len(x)), 0, leaves)[0] for _ in range(trees)],
                                        len(names))
    card = GBDTCard(device=device, feature_version=FEATURE_VERSION, feature_names=list(names),
                    output="log_ms", trees=ensemble.n_trees, nodes=ensemble.n_nodes,
                    max_depth=ensemble.max_depth, dtypes=["bfloat16", "float16"], layouts=["nn", "nt", "tn"])
    return GBDTModel(device, ensemble, card)
