"""The learned performance model: an MLP over `features.py` that predicts log runtime.

Architecture: standardized features -> [Linear -> ReLU] x len(hidden_widths) -> Linear = f(x), and

    log_runtime_ms = log(exp(f(x)) + kernel_overhead_ms)      (a logsumexp of two terms)

so a prediction never drops below the fixed cost of a launch, and the network only has to model the
part of the runtime that scales with the work (easier on a log scale). The overhead is a learned
parameter stored as its log. There is no batch normalization: a config scores the same alone or
among 1,400 others. Several networks trained from different seeds may be averaged
(`AveragedRuntimeNet`): averaging cancels part of each seed's ranking noise, and the members'
disagreement measures how unsure the model is (gemm_topk="auto").

On disk a trained MLP is the checkpoint `mlp` of `checkpoint.py` (`mlp.pt`, `mlp.json`), next to the cuBLAS
time head `aten` (model/cublas.py) that `estimate_aten` uses. Training lives in
kernel_select.offline.training.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError, UnsupportedProblemError
from kernel_select.model.auto_topk import SPREAD_TOP, auto_k_from_gap, spread_k
from kernel_select.model.base import PerformanceModel, register_model
from kernel_select.model.folders import MLP_STEM, find_checkpoint, no_trained_model
from kernel_select.model.card import Architecture, ModelCard, outside_domain, problems_like, trained_dtype
from kernel_select.model.checkpoint import build_body, load_checkpoint, load_network, read_card, retrain_hint
from kernel_select.model.cublas import ATEN_STEM, AtenHead
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION, featurize
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

STEM = MLP_STEM
WEIGHTS_FILE = f"{STEM}.pt"
CARD_FILE = f"{STEM}.json"
#: gemm_topk="auto" without a gap in the card: k = the configs predicted within 5% of the best.
DEFAULT_AUTO_GAP = 0.05


class RuntimeNet(nn.Module):
    """Standardized features (batch, n_features) -> log runtime in ms (batch,)."""

    def __init__(self, n_features: int, hidden_widths: Sequence[int],
                 kernel_overhead_ms: float = 0.005) -> None:
        super().__init__()
        self.body = build_body(architecture(n_features, hidden_widths))
        self.log_overhead_ms = nn.Parameter(torch.tensor(math.log(kernel_overhead_ms)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logaddexp(self.body(x).squeeze(-1), self.log_overhead_ms)

    @property
    def kernel_overhead_ms(self) -> float:
        return float(self.log_overhead_ms.detach().exp())


class AveragedRuntimeNet(nn.Module):
    """Several RuntimeNets of one shape, trained from different seeds: predicts the mean of their log
    runtimes."""

    def __init__(self, members: Sequence[RuntimeNet]) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an averaged net needs >= 2 members, got {len(members)}")
        self.members = nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.member_outputs(x).mean(dim=0)

    def member_outputs(self, x: torch.Tensor) -> torch.Tensor:
        """(members, batch) log runtime in ms."""
        return torch.stack([member(x) for member in self.members])

    @property
    def kernel_overhead_ms(self) -> float:
        return float(np.mean([member.kernel_overhead_ms for member in self.members]))


def architecture(n_features: int, hidden_widths: Sequence[int], members: int = 1) -> Architecture:
    """The card's description of a RuntimeNet body (and how many are averaged)."""
    return Architecture(inputs=n_features, hidden_widths=list(hidden_widths), activation="relu",
                        members=members)


def build_net(arch: Architecture) -> RuntimeNet | AveragedRuntimeNet:
    """The (untrained) network a card's architecture describes."""
    nets = [RuntimeNet(arch.inputs, arch.hidden_widths) for _ in range(arch.members)]
    return nets[0] if arch.members == 1 else AveragedRuntimeNet(nets)


# -- inference of an averaged net in fewer, larger matrix products -------------------------------------
#
# Inference for an averaged net in fewer, larger matrix products.
#
# `AveragedRuntimeNet` runs each member's layers one after another: 2 members x 4 layers = 8 small
# matmuls per `estimate`. Stacking the members' weights turns the first layer into one matmul (the
# members read the same features) and every later hidden layer into one batched matmul, which on one
# CPU core takes about 14% off the network's share of `estimate` (1.18 -> 1.02 ms over the seed
# problem's 1,206 configs, measured side by side). The output layer (one value per row) is a product
# and a sum: as a (width x 1) batched matmul it cost 0.09 ms over those configs, three times as much
# (0.03 ms). The result equals the members' mean to float32 rounding.
#
# Built once from a trained net: `MLPModel` never changes its weights after construction (its
# digest is cached the same way), so the stacked copies cannot go stale.

def fused_forward(net: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A function computing `net(x)` for an averaged net of Linear/ReLU members, or None for any
    other net (the caller then runs the net itself)."""
    members = getattr(net, "members", None)
    if members is None:
        return None
    bodies = [list(member.body) for member in members]
    kinds = {tuple(type(layer) for layer in body) for body in bodies}
    hidden = (len(bodies[0]) - 1) // 2
    if kinds != {(nn.Linear, nn.ReLU) * hidden + (nn.Linear,)} or hidden < 1:
        return None  # only Linear, ReLU, ..., Linear bodies, the same in every member
    linears = [[layer for layer in body if isinstance(layer, nn.Linear)] for body in bodies]
    count = len(members)
    with torch.no_grad():
        first_w = torch.cat([layers[0].weight for layers in linears]).clone()  # (members*out, in)
        first_b = torch.cat([layers[0].bias for layers in linears]).clone()
        # the hidden layers after the first: (members, in, out) weights, (members, 1, out) biases
        weights = [torch.stack([layers[i].weight.t() for layers in linears]).contiguous()
                   for i in range(1, len(linears[0]) - 1)]
        biases = [torch.stack([layers[i].bias for layers in linears]).unsqueeze(1).clone()
                  for i in range(1, len(linears[0]) - 1)]
        # the output layer: (members, 1, in) weights, (members, 1) biases
        last_w = torch.stack([layers[-1].weight for layers in linears]).clone()
        last_b = torch.stack([layers[-1].bias for layers in linears]).clone()
        overhead = torch.stack([member.log_overhead_ms for member in members]).unsqueeze(1).clone()

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(x, first_w, first_b).relu_()
        h = h.view(x.shape[0], count, -1).transpose(0, 1)  # (members, batch, width)
        for weight, bias in zip(weights, biases):
            h = torch.baddbmm(bias, h, weight).relu_()
        out = torch.sum(h * last_w, dim=-1).add_(last_b)
        return torch.logaddexp(out, overhead).mean(dim=0)

    return forward


class MLPModel(PerformanceModel):
    """The trained MLP for one device. Build with `MLPModel.load(dir)`, `load_for(device)` or training."""

    name = "mlp"

    def __init__(self, device: DeviceSpec | str, net: RuntimeNet | AveragedRuntimeNet, card: ModelCard,
                 aten: AtenHead | None = None) -> None:
        super().__init__(device)
        if card.feature_version not in FEATURE_SETS:
            raise ModelError(f"mlp model card: feature version {card.feature_version} is not one of this "
                             f"code's ({sorted(FEATURE_SETS)})")
        self.net = net.eval()
        self.card = card
        self.aten = aten  # the cuBLAS time head shipped with this MLP, if any
        self._mean = np.asarray(card.feature_mean, dtype=np.float32)
        self._inv_std = (1.0 / np.asarray(card.feature_std, dtype=np.float64)).astype(np.float32)
        self._digest: str | None = None
        self._forward: Callable[[torch.Tensor], torch.Tensor] | None = None  # built on first use

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        dtype = problem.dtype
        if not trained_dtype(dtype, self.card.dtypes):
            raise UnsupportedProblemError(
                f"mlp model for {device.key}: trained on {self.card.dtypes}, not {dtype}; collect {dtype} "
                f"data and retrain, or use the analytical model")
        x = self.features(problem, configs)
        x -= self._mean
        x *= self._inv_std
        if self._forward is None:
            self._forward = fused_forward(self.net) or self.net
        with torch.inference_mode():
            log_ms = self._forward(torch.from_numpy(x))
        runtime_ms = np.exp(log_ms.numpy().astype(np.float64))
        # Version 4 describes one GEMM of a batched problem: its batch elements are more CTAs of it.
        if self.card.feature_version < 5 and problem.batch != 1:
            return runtime_ms * problem.batch
        return runtime_ms

    def features(self, problem: Problem, configs: Sequence[GemmConfig]) -> np.ndarray:
        """The card's feature version of `configs` for `problem` (unstandardized)."""
        return featurize(problem, configs, self.device, self.card.feature_version)

    def estimate_aten(self, problem: Problem) -> float | None:
        """Predicted cuBLAS ms, in the units of `estimate`; None without a head or for a problem it was
        not trained on (batched, another op or dtype)."""
        if self.aten is None or not self.aten.supports(problem):
            return None
        return float(self.aten.predict_ms([problem])[0])

    def auto_topk(self, runtime_ms: np.ndarray, cap: int, problem: Problem | None = None,
                  configs: Sequence[GemmConfig] | None = None) -> int:
        """How many configs to benchmark for one GEMM, by the rule in the card (model/auto_topk.py): the
        members' disagreement over the predicted best configs where the card says "spread", else the
        near-ties of the prediction (`auto_topk_gap`); at least `auto_topk_floor`, at most `cap`."""
        rule = self.card.auto_topk
        floor = rule.auto_topk_floor
        if (rule.auto_topk_rule == "spread" and problem is not None and configs is not None
                and isinstance(self.net, AveragedRuntimeNet) and len(configs) == len(runtime_ms)):
            spread = self.member_spread(problem, configs, runtime_ms)
            return int(min(spread_k(spread, rule.auto_topk_spread, cap, floor)[()], len(configs)))
        gap = DEFAULT_AUTO_GAP if rule.auto_topk_gap is None else rule.auto_topk_gap
        return auto_k_from_gap(runtime_ms, gap, cap, floor)

    def trained_layouts(self) -> tuple[str, ...]:
        return tuple(self.card.layouts)

    def domain_gap(self, problem: Problem) -> str:
        return super().domain_gap(problem) or outside_domain(problem, self.card.dtypes, self.card.domain)

    def training_problems_like(self, problem: Problem) -> int | None:
        """The card's training problems in the problem's domain stratum (card.problems_like); None
        for a card that did not record its domain."""
        return None if self.card.domain is None else problems_like(problem, self.card.domain)

    def member_spread(self, problem: Problem, configs: Sequence[GemmConfig], runtime_ms: np.ndarray) -> float:
        """The members' disagreement about a problem (0 for a single network): the mean range of their
        log-ms predictions over the SPREAD_TOP configs of `runtime_ms` predicted fastest."""
        if not isinstance(self.net, AveragedRuntimeNet):
            return 0.0
        best = np.argsort(np.asarray(runtime_ms), kind="stable")[:SPREAD_TOP]
        x = self.features(problem, [configs[i] for i in best])
        x = (x - self._mean) * self._inv_std
        with torch.inference_mode():
            members = self.net.member_outputs(torch.from_numpy(x.astype(np.float32))).numpy()
        return float(np.mean(members.max(axis=0) - members.min(axis=0)))

    def digest(self) -> str:
        """sha256 of the weights and the model card. Inductor's cache keys include it (through the
        choices handler's uuid), so a retrained model never reuses choices made by the old one. The
        card's `gpu` record is left out: it says where the model may load, not what it predicts."""
        if self._digest is None:
            h = hashlib.sha256(self.card.model_dump_json(exclude={"gpu"}).encode())
            nets = [self.net] + ([self.aten.net] if self.aten is not None else [])
            for net in nets:
                for name, tensor in sorted(net.state_dict().items()):
                    h.update(name.encode())
                    h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
            self._digest = h.hexdigest()
        return self._digest

    def describe(self) -> str:
        data = self.card.data
        # the files read, and that their held-out problems (test, family, unseen) were not trained on:
        # `unseen`'s own file is among them, and the name alone reads as if it had been
        trained_on = (f"{data.file} ({data.rows} rows read, held-out problems left out)" if data
                      else "no recorded data")
        if self.card.device != self.device.key:  # a same-architecture stand-in (see load_default)
            trained_on += f" measured on {self.card.device}"
        init = self.card.hyperparameters.get("init")
        if isinstance(init, dict):  # fine-tuned (train --init): say from what
            trained_on += f", fine-tuned from the {init.get('device')} model"
        averaged_from = self.card.hyperparameters.get("averaged")
        if isinstance(averaged_from, list):  # kernel-select average-models
            trained_on += f", the average of {len(averaged_from)} trained models"
        members = self.card.architecture.members
        averaged = f" x {members} averaged" if members > 1 else ""
        return (f"mlp model for {self.device.key}, features v{self.card.feature_version}, "
                f"widths {self.card.hidden_widths}{averaged}, trained on {trained_on}")

    # -- loading --------------------------------------------------------------------------------------

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str | None = None, *,
             allow_same_architecture: bool = False) -> MLPModel:
        """Load a saved model for `device` (None: the device its card names), refusing one that does
        not match this code or the device (with `allow_same_architecture`, a model of a device with
        the same SM architecture is accepted). The folder's cuBLAS time head comes with it.

        Raises:
            ModelError: `model_dir` holds no model at all.
            ModelCardMismatchError: a file is missing, unreadable or disagrees with the running code or
                the device; the message names the file and how to retrain.
        """
        model_dir = Path(model_dir)
        spec = get_device(device) if device is not None else _card_device(model_dir)
        version = _card_feature_version(model_dir, spec)
        state, card = load_checkpoint(model_dir, STEM, spec, model=STEM, feature_version=version,
                                      feature_names=FEATURE_SETS[version],
                                      allow_same_architecture=allow_same_architecture)
        net = load_network(lambda: build_net(card.architecture), state, model_dir / WEIGHTS_FILE, card,
                         retrain_hint(model_dir, spec.key))
        aten = None
        if (model_dir / f"{ATEN_STEM}.pt").exists():  # optional: without it estimate_aten() is None
            aten = AtenHead.load(model_dir, spec, allow_same_architecture=allow_same_architecture)
        return cls(spec, net, card, aten)

    @classmethod
    def load_for(cls, spec: DeviceSpec) -> MLPModel:
        """The trained model serving `spec` (model/folders.py's policy), with a cuBLAS time head from its
        own folder or, failing that, the first folder that has one."""
        found = find_checkpoint(spec, STEM)
        if found is None:
            raise no_trained_model(spec)
        model = cls.load(found[0], spec, allow_same_architecture=True)
        # Once per process and device (runtime caches the model): which folder every entry point
        # that ranks without naming a model (the handler, top_k, the CLI) now uses for this GPU.
        log.info("kernel_select: %s GEMMs are ranked by the model in %s (trained on %s)", spec.key, found[0],
                 found[1].key)
        if model.aten is None:
            borrowed = find_checkpoint(spec, ATEN_STEM)
            if borrowed is not None:
                model.aten = AtenHead.load(borrowed[0], spec, allow_same_architecture=True)
        return model


def _card_feature_version(model_dir: Path, spec: DeviceSpec) -> int:
    """The card's feature version where this code computes it (else the newest, which the checkpoint
    check then refuses with the retrain hint)."""
    card_path = model_dir / CARD_FILE
    if not card_path.is_file():
        return FEATURE_VERSION  # load_checkpoint reports the missing file
    version = read_card(card_path, retrain_hint(model_dir, spec.key)).feature_version
    return version if version in FEATURE_SETS else FEATURE_VERSION


def _card_device(model_dir: Path) -> DeviceSpec:
    card_path = model_dir / CARD_FILE
    if not card_path.is_file():
        raise ModelError(f"{model_dir}: no trained mlp model here (no {CARD_FILE}); pass the device, or "
                         f"train one with `kernel-select train --out {model_dir}`")
    return get_device(read_card(card_path, retrain_hint(model_dir, "<device>")).device)


register_model("mlp", MLPModel.load_for)
