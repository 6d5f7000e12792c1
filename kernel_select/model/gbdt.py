"""The gradient-boosted tree model: LightGBM's trees, exported to numpy, over the MLP's features.

Fitted offline (kernel_select.offline.training.gbdt_fit, LightGBM in the `train` extra); inference
is numpy alone (model/trees.py walks the trees), so the core install ranks with it. Registered as
"gbdt": `get_model("gbdt", device)` loads the first model folder (model/folders.py's order: the
user's before the shipped, the device's own before a same-architecture stand-in) that holds one.

On disk a GBDT is two files in a model folder:

  gbdt.npz   the trees' arrays (trees.py), an uncompressed numpy archive read with allow_pickle=False
  gbdt.json  a `GBDTCard`: the feature version and names, what the trees' sum means (`output`), the
             trees' size, the sha256 of gbdt.npz (a card and arrays of two trainings never load
             together), dtypes, layouts and domain trained on, and the provenance

What the trees' sum means (`output`):

  log_ms      a regression of log runtime: estimate() returns its exp, milliseconds as the MLP's
  rank_score  a lambdarank score, higher = faster: estimate() returns exp(-score), which orders the
              configs as the score does but is no time (the card says so; `describe` too)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kernel_select.atomic_write import write_atomic
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device, same_architecture
from kernel_select.errors import (
    ModelCardMismatchError, ModelError, NoTrainedModelError, UnsupportedProblemError,
)
from kernel_select.lut.bounded_read import FileKind
from kernel_select.model.base import PerformanceModel, register_model
from kernel_select.model.card import (
    DataProvenance, Domain, GpuIdentity, TrainedLayouts, outside_domain, trained_dtype,
)
from kernel_select.model.checkpoint import MAX_CARD_BYTES, check_gpu, read_validated, save_card
from kernel_select.model.features import FEATURE_SETS, featurize
from kernel_select.model.folders import model_folders
from kernel_select.model.trees import MAX_DEPTH, MAX_NODES, MAX_TREES, TreeEnsemble
from kernel_select.problem import Problem

STEM = "gbdt"
ARRAYS_FILE = f"{STEM}.npz"
CARD_FILE = f"{STEM}.json"
Output = Literal["log_ms", "rank_score"]


class GBDTCard(BaseModel):
    """The JSON half of a GBDT (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    model: Literal["gbdt"] = "gbdt"
    device: str  # DeviceSpec.key the training data was measured on
    gpu: GpuIdentity | None = None
    feature_version: int
    feature_names: list[str]
    output: Output
    trees: int = Field(ge=1, le=MAX_TREES)
    nodes: int = Field(ge=1, le=MAX_NODES)
    max_depth: int = Field(ge=0, le=MAX_DEPTH)
    arrays_sha256: str = ""  # of gbdt.npz; written by `GBDTModel.save`
    dtypes: list[str] = []
    layouts: TrainedLayouts
    domain: Domain | None = None
    hyperparameters: dict[str, object] = {}
    data: DataProvenance | None = None
    metrics: dict[str, object] = {}
    trained_at: str = ""
    versions: dict[str, str] = {}


class GBDTModel(PerformanceModel):
    """A GBDT for one device. Build with `GBDTModel.load(dir)`, `load_for(device)` or gbdt_fit."""

    name = "gbdt"

    def __init__(self, device: DeviceSpec | str, trees: TreeEnsemble, card: GBDTCard) -> None:
        super().__init__(device)
        if card.feature_version not in FEATURE_SETS:
            raise ModelError(f"gbdt model card: feature version {card.feature_version} is not one of this "
                             f"code's ({sorted(FEATURE_SETS)})")
        if trees.n_features != len(FEATURE_SETS[card.feature_version]):
            raise ModelError(f"gbdt model: the trees read {trees.n_features} features, feature version "
                             f"{card.feature_version} has {len(FEATURE_SETS[card.feature_version])}")
        self.trees = trees
        self.card = card
        self._digest: str | None = None

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        if not trained_dtype(problem.dtype, self.card.dtypes):
            raise UnsupportedProblemError(
                f"gbdt model for {device.key}: trained on {self.card.dtypes}, not {problem.dtype}; collect "
                f"{problem.dtype} data and retrain, or use the analytical model")
        raw = self.trees.raw(featurize(problem, configs, self.device, self.card.feature_version))
        # clipped where exp would overflow float64: a rank score has no natural scale
        runtime_ms = np.exp(np.clip(raw if self.card.output == "log_ms" else -raw, -700.0, 700.0))
        # Version 4 describes one GEMM of a batched problem: its batch elements are more CTAs of it.
        if self.card.feature_version < 5 and problem.batch != 1:
            return runtime_ms * problem.batch
        return runtime_ms

    def trained_layouts(self) -> tuple[str, ...]:
        return tuple(self.card.layouts)

    def domain_gap(self, problem: Problem) -> str:
        return super().domain_gap(problem) or outside_domain(problem, self.card.dtypes, self.card.domain)

    def digest(self) -> str:
        """sha256 of the card and the trees (Inductor's cache keys include it, as the MLP's)."""
        if self._digest is None:
            h = hashlib.sha256(self.card.model_dump_json(exclude={"gpu"}).encode())
            h.update(self.trees.to_npz())
            self._digest = h.hexdigest()
        return self._digest

    def describe(self) -> str:
        data = self.card.data
        trained_on = f"{data.file} ({data.rows} rows)" if data else "no recorded data"
        if self.card.device != self.device.key:
            trained_on += f" measured on {self.card.device}"
        what = ("log ms" if self.card.output == "log_ms"
                else "a ranking score (its times order configs, they are not milliseconds)")
        return (f"gbdt model for {self.device.key}, features v{self.card.feature_version}, "
                f"{self.card.trees} trees predicting {what}, trained on {trained_on}")

    # -- saving and loading ---------------------------------------------------------------------------

    def save(self, model_dir: str | Path) -> Path:
        """Write gbdt.npz, then gbdt.json with its sha256, into `model_dir` (created if needed), each
        atomically; the folder's other files stay. Returns the card's path."""
        model_dir = Path(model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        arrays = self.trees.to_npz()
        self.card = self.card.model_copy(update={
            "arrays_sha256": hashlib.sha256(arrays).hexdigest(), "trees": self.trees.n_trees,
            "nodes": self.trees.n_nodes, "max_depth": self.trees.max_depth})
        self._digest = None
        write_atomic(model_dir / ARRAYS_FILE, arrays)
        save_card(model_dir / CARD_FILE, self.card)
        return model_dir / CARD_FILE

    @classmethod
    def load(cls, model_dir: str | Path, device: DeviceSpec | str | None = None, *,
             allow_same_architecture: bool = False) -> GBDTModel:
        """Load the GBDT in `model_dir` for `device` (None: the device its card names).

        Raises:
            ModelError: `model_dir` holds no GBDT at all.
            ModelCardMismatchError: a file is missing, unreadable, or disagrees with the other file,
                the running code or the device; the message names the file and the fix.
        """
        model_dir = Path(model_dir)
        card_path, arrays_path = model_dir / CARD_FILE, model_dir / ARRAYS_FILE
        if not card_path.exists() and not arrays_path.exists():
            raise ModelError(f"{model_dir}: no gbdt model here (no {CARD_FILE}, {ARRAYS_FILE})")
        hint = refit_hint(model_dir)
        for path in (card_path, arrays_path):
            if not path.is_file():
                raise ModelCardMismatchError(f"{path}: missing or not a regular file (a gbdt model is "
                                             f"{CARD_FILE} and {ARRAYS_FILE}); {hint}")
        card = _read_card(card_path, hint)
        spec = get_device(device if device is not None else card.device)
        _check_card(card, card_path, spec, hint, allow_same_architecture)
        digest = hashlib.sha256(arrays_path.read_bytes()).hexdigest()
        if digest != card.arrays_sha256:
            raise ModelCardMismatchError(f"{arrays_path}: its sha256 is not the one {card_path.name} records "
                                         f"(the two files come from different trainings, or one is damaged); "
                                         f"{hint}")
        trees = TreeEnsemble.load(arrays_path, hint)
        sizes = (trees.n_trees, trees.n_nodes, trees.max_depth, trees.n_features)
        expected = (card.trees, card.nodes, card.max_depth, len(card.feature_names))
        if sizes != expected:
            raise ModelCardMismatchError(f"{arrays_path}: {sizes[0]} trees, {sizes[1]} nodes, depth "
                                         f"{sizes[2]}, {sizes[3]} features; the card says {expected}; {hint}")
        return cls(spec, trees, card)

    @classmethod
    def load_for(cls, spec: DeviceSpec) -> GBDTModel:
        """The GBDT serving `spec`: the first of model_folders(spec) holding one."""
        for folder, _ in model_folders(spec):
            if (folder / CARD_FILE).exists() or (folder / ARRAYS_FILE).exists():
                return cls.load(folder, spec, allow_same_architecture=True)
        folders = ", ".join(str(folder) for folder, _ in model_folders(spec))
        raise NoTrainedModelError(f"no gbdt model for {spec.key} in any model folder ({folders}); fit one "
                                  "with kernel_select.offline.training.gbdt_fit and save it into one of them")


_CARD_KIND = FileKind("gbdt model card", f"a gbdt model card ({CARD_FILE} beside {ARRAYS_FILE})",
                      MAX_CARD_BYTES, "kernel_select.model.checkpoint.MAX_CARD_BYTES",
                      error=ModelCardMismatchError)


def _read_card(path: Path, hint: str) -> GBDTCard:
    return read_validated(path, hint, GBDTCard, _CARD_KIND)


def _check_card(card: GBDTCard, path: Path, spec: DeviceSpec, hint: str,
                allow_same_architecture: bool) -> None:
    """Refuse a card of another device, GPU or feature version (as checkpoint.check_card does the MLP's)."""
    stand_in = allow_same_architecture and any(other.key == card.device for other in same_architecture(spec))
    if card.device != spec.key and not stand_in:
        raise ModelCardMismatchError(f"{path}: model was trained for device {card.device!r}, not "
                                     f"{spec.key!r}; {hint}")
    check_gpu(card, path, spec)  # type: ignore[arg-type]  # reads .gpu and .device, as a ModelCard has
    names = FEATURE_SETS.get(card.feature_version)
    if names is None or tuple(card.feature_names) != names:
        raise ModelCardMismatchError(
            f"{path}: feature_version {card.feature_version} with {len(card.feature_names)} features is not "
            f"one of this code's feature sets (versions {sorted(FEATURE_SETS)}, each with its own names); "
            f"{hint}")


def refit_hint(model_dir: Path) -> str:
    """The fix for a GBDT that cannot be used (there is no command that trains one yet)."""
    return (f"fit it again (kernel_select.offline.training.gbdt_fit.fit_gbdt, then "
            f".model.save({str(model_dir)!r})), or remove {CARD_FILE} and {ARRAYS_FILE} from the folder")


register_model("gbdt", GBDTModel.load_for)
