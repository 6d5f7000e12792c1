"""The shortlist ensemble: an MLP ranks every config, gradient-boosted trees re-score its best few.

The MLP scores every config and keeps its `shortlist` best. A LightGBM ranker (lambdarank, trained
to order each problem's configs rather than to time them) orders the shortlist; the first
`calibrated_top` get the mean of the MLP's and a LightGBM regressor's log-ms, the rest the MLP's,
raised to at least the slowest of those; everything outside the shortlist is raised to at least the
slowest shortlisted time. Within each group the i-th config in the ranker's order gets the group's
i-th smallest time, so sorting by time reproduces the ranker's order while the times stay the
calibrated ones (docs/model.md has the measurements behind each choice).

Trees rank unseen shapes better than the MLP (they split on alignment and tile counts instead of
interpolating smooth curves), but cost ~17 us a row for the 400-tree regressor: 1,400 configs would
take ~25 ms, 16 take 0.3 ms. The MLP is cheap and puts the winner in its top 64 (its top-16 already
reach 0.999 of the oracle on held-out problems). The MLP and the regressor both predict log
milliseconds; their disagreement at the top (`spread`) measures how unsure the model is.

On disk, models/<device>/ holds `ensemble_mlp.pt` (a state_dict, loaded with `weights_only=True`),
`ensemble_trees.txt` and `ensemble_ranker.txt` (LightGBM's own text format: no pickle) and
`ensemble_card.json`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelCardMismatchError, ModelError, ProblemError, UnsupportedProblemError
from kernel_select.model import features as v1
from kernel_select.model import features_v2 as v2
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.model.auto_topk import spread_k
from kernel_select.model.card import TrainedLayouts
from kernel_select.model import PerformanceModel, models_dir
from kernel_select.problem import Problem, dtype_name

MLP_FILE = "ensemble_mlp.pt"
TREES_FILE = "ensemble_trees.txt"
RANKER_FILE = "ensemble_ranker.txt"
CARD_FILE = "ensemble_card.json"
_SAME_FEATURES = {"float16": "bfloat16", "bfloat16": "float16"}
AUTO_CAP = 8  # topk="auto" never asks for more configs than this per GEMM


def auto_k(spread: Any, s0: float, cap: int = AUTO_CAP) -> np.ndarray:
    """topk="auto": k = 1 while the spread is at most s0, doubling with every doubling of the
    spread beyond it, at most `cap` (offline/training/uncertainty.py chooses s0 and measures the rule)."""
    return spread_k(spread, s0, cap, floor=1)


class EnsembleCard(BaseModel):
    """Everything besides the weights needed to rebuild and check the ensemble."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    model: Literal["ensemble"] = "ensemble"
    device: str
    feature_version: int
    feature_names: list[str]  # v2; the MLP reads the first `mlp_features` of them
    mlp_features: int
    feature_mean: list[float]  # MLP standardization (training rows)
    feature_std: list[float]
    hidden_widths: list[int]
    shortlist: int
    ranker: bool = False  # the shortlist is ordered by RANKER_FILE
    calibrated_top: int = 16  # shortlisted configs whose time the regression trees refine
    auto_threshold: float | None = None  # s0 of `auto_k`, chosen on the validation problems
    dtypes: list[str]
    layouts: TrainedLayouts = [DEFAULT_LAYOUT]  # operand layouts in training (ModelCard.layouts)
    hyperparameters: dict[str, Any] = {}
    data: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    trained_at: str = ""
    trainer: dict[str, str] = {}


class EnsembleModel(PerformanceModel):
    """MLP + LightGBM shortlist ensemble for one device (see the module docstring)."""

    name = "ensemble"

    def __init__(self, device: DeviceSpec | str, net: Any, booster: Any, card: EnsembleCard,
                 ranker: Any = None) -> None:
        super().__init__(device)
        if card.ranker != (ranker is not None):
            raise ModelCardMismatchError(f"ensemble card: ranker={card.ranker}, but the ranker is "
                                         f"{'missing' if ranker is None else 'present'}")
        self.net, self.booster, self.ranker, self.card = net.eval(), booster, ranker, card
        self._mean = np.asarray(card.feature_mean, dtype=np.float32)
        self._inv_std = (1.0 / np.asarray(card.feature_std, dtype=np.float64)).astype(np.float32)

    def members_log_ms(self, m: int, n: int, k: int, dtype: str,
                       configs: Sequence[GemmConfig]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the MLP's log ms of every config, the shortlist's config indices best first, the
        regression trees' log ms of the first `calibrated_top` of them).

        Cost control (estimate() must stay near 2 ms for 1,400 configs): v1 features for all
        configs, v2 features only for the shortlist, the regression trees only for its head.
        """
        import torch

        dtype = self._check_dtype(dtype)
        z = (v1.featurize(m, n, k, dtype, configs, self.device) - self._mean) * self._inv_std
        with torch.inference_mode():
            mlp = self.net(torch.from_numpy(z)).numpy().astype(np.float64)
        short = np.argsort(mlp, kind="stable")[:self.card.shortlist]
        x = v2.featurize(m, n, k, dtype, [configs[i] for i in short], self.device)
        if self.ranker is not None:  # LightGBM ranks high scores first
            order = np.argsort(-self.ranker.predict(x, num_threads=1), kind="stable")
            short, x = short[order], x[order]
        head = min(self.card.calibrated_top, len(short))
        trees = self.booster.predict(x[:head], num_threads=1).astype(np.float64)
        return mlp, short, trees

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        mlp, short, trees = self.members_log_ms(problem.m, problem.n, problem.k, problem.dtype, configs)
        head, tail = short[:len(trees)], short[len(trees):]
        out = mlp.copy()
        # calibrated times for the head; each group keeps the shortlist's order (the ranker's, or
        # the MLP's): its i-th config gets the group's i-th smallest time, so "lower = better" holds
        out[head] = np.sort((mlp[head] + trees) / 2)
        floor = out[head].max()
        out[tail] = np.sort(np.maximum(mlp[tail], floor))
        rest = np.ones(len(out), dtype=bool)
        rest[short] = False
        out[rest] = np.maximum(out[rest], out[short].max())
        # trained on single GEMMs: batch elements are more CTAs of the same kernel (as the MLP)
        return np.exp(out) * problem.batch

    def spread(self, m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig]) -> float:
        """How much the members disagree about this problem's best configs: the mean absolute
        difference of the MLP's and the trees' log-ms predictions over the 4 best shortlisted."""
        mlp, short, trees = self.members_log_ms(m, n, k, dtype, configs)
        best = min(4, len(trees))
        return float(np.mean(np.abs(mlp[short[:best]] - trees[:best])))

    def auto_topk_for(self, m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig]) -> int:
        """How many configs to benchmark for this problem under topk="auto"."""
        if self.card.auto_threshold is None:
            raise ModelError(f"{self.describe()}: no auto threshold in its card; retrain")
        return int(auto_k(self.spread(m, n, k, dtype, configs), self.card.auto_threshold)[()])

    def trained_layouts(self) -> tuple[str, ...]:
        return tuple(self.card.layouts)

    def _check_dtype(self, dtype: str) -> str:
        try:
            dtype = dtype_name(dtype)
        except ProblemError as exc:
            raise UnsupportedProblemError(str(exc)) from None
        if dtype not in self.card.dtypes and _SAME_FEATURES.get(dtype) not in self.card.dtypes:
            raise UnsupportedProblemError(f"ensemble model for {self.device.key}: trained on "
                                          f"{self.card.dtypes}, not {dtype}")
        return dtype

    def digest(self) -> str:
        h = hashlib.sha256(self.card.model_dump_json().encode())
        for name, tensor in sorted(self.net.state_dict().items()):
            h.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
        for booster in (self.booster, self.ranker):
            if booster is not None:
                h.update(booster.model_to_string().encode())
        return h.hexdigest()

    def describe(self) -> str:
        rows = self.card.data.get("rows", "?")
        ranked = ", lambdarank order" if self.card.ranker else ""
        return (f"ensemble model for {self.device.key} (MLP {self.card.hidden_widths} + LightGBM on its "
                f"best {self.card.shortlist}{ranked}), features v{self.card.feature_version}, trained on "
                f"{self.card.data.get('file', 'unrecorded data')} ({rows} rows)")

    def save(self, model_dir: str | Path) -> Path:
        import torch

        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(self.net.state_dict(), model_dir / MLP_FILE)
        (model_dir / TREES_FILE).write_text(self.booster.model_to_string())
        if self.ranker is not None:
            (model_dir / RANKER_FILE).write_text(self.ranker.model_to_string())
        else:
            (model_dir / RANKER_FILE).unlink(missing_ok=True)  # a stale one would not match the card
        (model_dir / CARD_FILE).write_text(self.card.model_dump_json(indent=2) + "\n")
        return model_dir

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str) -> EnsembleModel:
        """Raises ModelError when nothing is there, ModelCardMismatchError for a broken or foreign one."""
        import lightgbm as lgb
        import torch

        from kernel_select.model.mlp import RuntimeNet

        model_dir, spec = Path(model_dir), get_device(device)
        paths = [model_dir / name for name in (MLP_FILE, TREES_FILE, CARD_FILE)]
        if not any(p.exists() for p in paths):
            raise ModelError(f"no ensemble model in {model_dir} for {spec.key}")
        try:
            card = EnsembleCard.model_validate_json(paths[2].read_text())
            _check_card(card, spec)
            net = RuntimeNet(card.mlp_features, card.hidden_widths)
            net.load_state_dict(torch.load(paths[0], map_location="cpu", weights_only=True), strict=True)
            booster = lgb.Booster(model_str=paths[1].read_text())
            ranker = lgb.Booster(model_str=(model_dir / RANKER_FILE).read_text()) if card.ranker else None
        except ModelCardMismatchError:
            raise
        except (OSError, ValidationError, RuntimeError, ValueError, lgb.basic.LightGBMError) as exc:
            raise ModelCardMismatchError(f"{model_dir}: cannot load the ensemble model "
                                         f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        return cls(spec, net, booster, card, ranker)


def _check_card(card: EnsembleCard, spec: DeviceSpec) -> None:
    if card.device != spec.key:
        raise ModelCardMismatchError(f"ensemble card: trained for {card.device!r}, not {spec.key!r}")
    if card.feature_version != v2.FEATURE_VERSION or tuple(card.feature_names) != v2.FEATURE_NAMES:
        raise ModelCardMismatchError(f"ensemble card: feature version {card.feature_version}, this code "
                                     f"computes {v2.FEATURE_VERSION}; retrain")
    n = card.mlp_features
    if len(card.feature_mean) != n or len(card.feature_std) != n or not all(
            math.isfinite(s) and s > 0 for s in card.feature_std):
        raise ModelCardMismatchError(f"ensemble card: standardization needs {n} finite, positive entries")


def load_shipped(device: DeviceSpec | str) -> EnsembleModel:
    """The ensemble shipped in models/<device>/.

    Not in the model registry: the shortlist makes a config's time depend on the other configs
    scored with it (the floors and the ranker's order), which breaks the registry contract's batch
    invariance (tests/model_contract.py). Whether to relax that contract or make the ensemble
    invariant is the open decision before it can become the default.
    """
    spec = get_device(device)
    return EnsembleModel.load(models_dir() / spec.key, spec)
