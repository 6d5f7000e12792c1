"""The model calibrate fine-tunes (`--from`): the nearest trained model, one named, or none.

  auto    the first trained model model/folders.py would serve this GPU with (the user's model
          directory, then the shipped models; this device's own folder, then one of the same SM
          architecture), leaving out the folder calibrate writes: a GPU of an architecture that
          has a model starts from it, any other is trained from scratch
  none    from scratch
  DEVICE  the trained model of that device key ("h100"), from the same folders
  FOLDER  a folder holding mlp.pt and mlp.json (a path: it contains a "/" or names a folder)

KERNEL_SELECT_HIDE_SHIPPED hides shipped models from `auto` and DEVICE as it does from the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_select.device import DeviceSpec, serves_anyway
from kernel_select.errors import OptionError
from kernel_select.model.card import MAX_MEMBERS
from kernel_select.model.folders import model_folders
from kernel_select.model.mlp import CARD_FILE, WEIGHTS_FILE, MLPModel
from kernel_select.resources import model_roots, shipped_dir, shipped_hidden

AUTO, NONE = "auto", "none"


@dataclass(frozen=True)
class StartModel:
    """A trained MLP to fine-tune, and the same network ranking configs for the GPU calibrated."""

    folder: Path
    model: MLPModel  # for the calibrated device (its own features, the start's weights)
    trained_on: str  # the device key of its card

    def describe(self) -> str:
        return f"the {self.trained_on} model in {self.folder}"

    def stands_in_for(self, spec: DeviceSpec) -> bool:
        """Whether kernel_select would serve `spec` with this model anyway (model/folders.py): it is
        that GPU's own, or one of the same SM architecture. A model calibrated from it claims its domain."""
        return serves_anyway(self.trained_on, spec)

    def keeps_members(self) -> bool:
        """Whether the calibrated model can hold this model's members beside as many fine-tuned ones
        (a card holds at most MAX_MEMBERS networks): a user's `train --members 8` cannot."""
        return 2 * self.model.card.architecture.members <= MAX_MEMBERS


def resolve_start(choice: str, spec: DeviceSpec, out_folder: Path) -> StartModel | None:
    """The model `--from` names for calibrating `spec` into `out_folder` (module docstring); None:
    from scratch.

    Raises:
        OptionError: a device or folder without a trained model.
        ModelError: a model that is there but does not load.
    """
    choice = choice.strip()
    if choice.lower() == NONE:
        return None
    if choice.lower() == AUTO:
        found = next((folder for folder, _ in model_folders(spec)
                      if _has_model(folder) and folder.resolve() != out_folder.resolve()), None)
        return None if found is None else _load(found, spec)
    if "/" in choice or Path(choice).is_dir():
        if not _has_model(Path(choice)):
            raise OptionError(f"calibrate: --from {choice}: no trained model there (expected {WEIGHTS_FILE} "
                              f"and {CARD_FILE}); pass a model folder, a device key such as h100, auto or "
                              "none")
        return _load(Path(choice), spec)
    key = choice.lower()
    shipped = shipped_dir("models")
    for root in model_roots():
        folder = root / key
        if not (root == shipped and shipped_hidden(key)) and _has_model(folder):
            return _load(folder, spec)
    roots = ", ".join(str(root) for root in model_roots())
    raise OptionError(f"calibrate: --from {choice}: no trained model for device {key!r} in {roots}; pass a "
                      f"device key that has one (h100, h200), a model folder, auto or none")


def _has_model(folder: Path) -> bool:
    return (folder / WEIGHTS_FILE).is_file() and (folder / CARD_FILE).is_file()


def _load(folder: Path, spec: DeviceSpec) -> StartModel:
    """The model in `folder` for the device its card names (this GPU when that is its key), then the
    same network over `spec`'s features: it ranks this GPU's configs as it is before fine-tuning."""
    from kernel_select.model.checkpoint import read_card, retrain_hint

    card = read_card(folder / CARD_FILE, retrain_hint(folder, spec.key))
    source = MLPModel.load(folder, spec if card.device == spec.key else None, allow_same_architecture=True)
    return StartModel(folder=folder, model=MLPModel(spec, source.net, source.card, source.aten),
                      trained_on=source.card.device)
