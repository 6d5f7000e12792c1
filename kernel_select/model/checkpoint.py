"""One checkpoint format for every learned model: weights plus a JSON model card.

A checkpoint named `<stem>` in a model folder is two files:

  <stem>.pt     the network's state dict (tensors only), written with torch.save and read back with
                `torch.load(weights_only=True)`: loading never unpickles arbitrary objects
  <stem>.json   a `ModelCard`: everything else the model needs to run (architecture, feature
                version and names, standardization statistics, kernel overhead, dtypes) and its
                provenance (device, dataset hash, training software versions, metrics, date)

The card holds the architecture, so a checkpoint rebuilds its own network (`build_body`) without
constants in code. Every load failure is a ModelError naming the file and what to do about it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kernel_select import warn
from kernel_select.atomic_write import write_atomic
from kernel_select.device import DeviceSpec
from kernel_select.errors import KernelSelectError, ModelCardMismatchError, ModelError
from kernel_select.lut.bounded_read import FileKind, read_json
from kernel_select.model.card import Architecture, ModelCard
from kernel_select.resources import shipped_dir, user_models_dir

SchemaT = TypeVar("SchemaT", bound=BaseModel)

log = logging.getLogger(__name__)

#: A weights file larger than this is not one of ours (the shipped MLP is ~60 KB); refusing it
#: before reading keeps a wrong path (a dataset, a device file) from exhausting memory.
MAX_WEIGHTS_BYTES = 256 * 1024 * 1024
MAX_CARD_BYTES = 16 * 1024 * 1024


def retrain_hint(model_dir: Path | str, device: str) -> str:
    """The fix for a model file that cannot be used: train a new one in place, or remove it (nothing
    falls back to the analytical model: model/folders.py). A shipped folder is part of the package and
    is never to be touched: the fix there is a model of one's own in the user's model directory,
    which is searched first."""
    if _is_shipped(Path(model_dir)):
        return (f"{model_dir} is a model shipped with kernel_select (leave it as it is); train one for your "
                f"data with `kernel-select train --data <dataset.parquet> --out {user_models_dir() / device} "
                f"--device {device}` (your model directory is searched first)")
    return (f"retrain with `kernel-select train --data <dataset.parquet> --out {model_dir} "
            f"--device {device}`, or delete the folder: the next folder with a model for the device then "
            f"serves it, or with none Inductor keeps its own configs")


def _is_shipped(model_dir: Path) -> bool:
    try:
        return model_dir.resolve().is_relative_to(shipped_dir("models").resolve())
    except OSError:
        return False


def build_body(architecture: Architecture) -> Any:
    """The network a card describes, freshly initialized (load the state dict into it)."""
    from torch import nn

    activation = {"relu": nn.ReLU, "silu": nn.SiLU}[architecture.activation]
    layers: list[Any] = []
    width = architecture.inputs
    for hidden in architecture.hidden_widths:
        layers += [nn.Linear(width, hidden), activation()]
        width = hidden
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def save_checkpoint(model_dir: str | Path, stem: str, state_dict: dict[str, Any], card: ModelCard) -> Path:
    """Write `<stem>.pt` and `<stem>.json` into `model_dir` (created if needed), each atomically."""
    import io

    import torch

    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({name: tensor.detach().cpu() for name, tensor in state_dict.items()}, buffer)
    write_atomic(model_dir / f"{stem}.pt", buffer.getvalue())
    save_card(model_dir / f"{stem}.json", card)
    return model_dir / f"{stem}.pt"


def save_card(path: Path, card: BaseModel) -> None:
    """Write a model card (any checkpoint's, or a tree model's) as indented JSON, atomically."""
    write_atomic(path, (card.model_dump_json(indent=2) + "\n").encode())


def load_checkpoint(model_dir: str | Path, stem: str, spec: DeviceSpec, *, model: str,
                    feature_version: int, feature_names: Sequence[str],
                    allow_same_architecture: bool = False) -> tuple[dict[str, Any], ModelCard]:
    """Read and check the checkpoint `<stem>` in `model_dir` for device `spec`.

    The card must describe `model` with this code's features, for `spec` (or, with
    `allow_same_architecture`, a device of the same SM architecture).

    Raises:
        ModelError: neither file exists.
        ModelCardMismatchError: a file is missing, unreadable, refused by the weights-only
            unpickler, or does not match this code or the device; the message names the file
            and the fix.
    """
    model_dir = Path(model_dir)
    weights, card_path = model_dir / f"{stem}.pt", model_dir / f"{stem}.json"
    hint = retrain_hint(model_dir, spec.key)
    if not weights.exists() and not card_path.exists():
        raise ModelError(f"{model_dir}: no trained {model} model here for {spec.key}; {hint}")
    for path in (weights, card_path):
        if not path.is_file():
            raise ModelCardMismatchError(f"{path}: missing or not a regular file (a checkpoint is "
                                         f"{weights.name} and {card_path.name}); {hint}")
    card = read_card(card_path, hint)
    check_card(card, card_path, spec, hint, model=model, feature_version=feature_version,
               feature_names=feature_names, allow_same_architecture=allow_same_architecture)
    return _read_weights(weights, hint), card


def read_card(path: Path, hint: str) -> ModelCard:
    """Parse a card file; any problem is a ModelCardMismatchError naming the file and field. The
    package's one reader of user files reads it (lut/bounded_read.py: bounded, a UTF-8 BOM
    accepted as in every JSON file it reads, a number of thousands of digits refused in one line)."""
    return read_validated(path, hint, ModelCard, _CARD_FILE)


def read_validated(path: Path, hint: str, schema: type[SchemaT], kind: FileKind) -> SchemaT:
    """A model folder's JSON file parsed into `schema` (a card of any model kind): a file that cannot
    be read or does not validate is a ModelCardMismatchError naming the file, the first bad field and
    `hint` (what to do)."""
    try:
        raw = read_json(path, kind)
    except KernelSelectError as exc:
        raise ModelCardMismatchError(f"{exc}; {hint}") from None
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "card"
        message = first["msg"].removeprefix("Value error, ")
        raise ModelCardMismatchError(f"{path}: field {where!r}: {message}; {hint}") from None


_CARD_FILE = FileKind("model card", "a model card (<stem>.json beside <stem>.pt)", MAX_CARD_BYTES,
                      "kernel_select.model.checkpoint.MAX_CARD_BYTES", error=ModelCardMismatchError)


def check_card(card: ModelCard, path: Path, spec: DeviceSpec, hint: str, *, model: str,
               feature_version: int, feature_names: Sequence[str],
               allow_same_architecture: bool = False) -> None:
    """Refuse a card that this code or this device cannot use."""
    if card.model != model:
        raise ModelCardMismatchError(f"{path}: holds a {card.model!r} model, not {model!r}; {hint}")
    if card.device != spec.key and not (allow_same_architecture and _same_architecture(card.device, spec)):
        raise ModelCardMismatchError(f"{path}: model was trained for device {card.device!r}, "
                                     f"not {spec.key!r}; {hint}")
    check_gpu(card, path, spec)
    if card.feature_version != feature_version or tuple(card.feature_names) != tuple(feature_names):
        raise ModelCardMismatchError(
            f"{path}: feature_version {card.feature_version} ({len(card.feature_names)} features"
            f"{_first_other_feature(card.feature_names, feature_names)}) does not match this code's "
            f"feature version {feature_version} ({len(feature_names)} features); {hint}")
    n = len(feature_names)
    if card.architecture.inputs != n or len(card.feature_mean) != n or len(card.feature_std) != n:
        raise ModelCardMismatchError(
            f"{path}: architecture.inputs, feature_mean and feature_std must all be {n}, got "
            f"{card.architecture.inputs}/{len(card.feature_mean)}/{len(card.feature_std)}; {hint}")
    if not all(math.isfinite(s) and s > 0 for s in card.feature_std):
        raise ModelCardMismatchError(f"{path}: feature_std must be finite and positive; {hint}")
    if not all(math.isfinite(m) for m in card.feature_mean):
        raise ModelCardMismatchError(f"{path}: feature_mean must be finite; {hint}")


def check_gpu(card: ModelCard, path: Path, spec: DeviceSpec) -> None:
    """Refuse a card of `spec`'s key that records another GPU: another SM count or capability. One
    that differs only in name (an H100 NVL beside the H100 SXM the shipped model was measured on)
    loads, announced with one warning. A same-architecture stand-in (a card of another key) is
    announced where it is chosen (model/folders.py), not here."""
    gpu = card.gpu
    if gpu is None or card.device != spec.key:
        return
    if gpu.sm_count != spec.sm_count or tuple(gpu.capability) != tuple(spec.capability):
        raise ModelCardMismatchError(
            f"{path}: model was measured on {gpu.describe()}, not on this {spec.identity}; a model "
            f"serves only the GPU it was measured on: run `kernel-select calibrate` on this GPU, or "
            f"move {path.parent} away")
    if " ".join(gpu.name.lower().split()) != " ".join(spec.name.lower().split()):
        warn.warn_once(("gpu name", str(path.parent), spec.name), log,
                       "kernel_select: the models in %s were measured on %s; this GPU is %s (same "
                       "architecture and SM count); `kernel-select calibrate` trains a model for this GPU",
                       path.parent, gpu.name, spec.name)


def _first_other_feature(card_names: Sequence[str], names: Sequence[str]) -> str:
    """Where a card's feature names first differ from this code's, when the count alone does not tell
    (a card of the same version and count whose features are others, or in another order)."""
    if len(card_names) != len(names):
        return ""
    i = next((i for i, (a, b) in enumerate(zip(card_names, names)) if a != b), None)
    return "" if i is None else f"; feature {i} is {card_names[i]!r}, this code's is {names[i]!r}"


def load_network(build: Callable[[], Any], state: dict[str, Any], weights: Path, card: ModelCard,
                 hint: str) -> Any:
    """The network `build()` makes, with `state` loaded. The network is first built on torch's meta
    device (no memory) and its parameter shapes compared with the weights', so a card that does not
    match its weights is refused before anything the size of the card's network is allocated.

    Raises:
        ModelCardMismatchError: a missing, extra or differently shaped tensor.
    """
    import torch

    arch = card.architecture

    def mismatch(detail: str) -> ModelCardMismatchError:
        return ModelCardMismatchError(
            f"{weights}: weights do not fit the card's architecture ({arch.inputs} inputs, widths "
            f"{arch.hidden_widths}, {arch.members} member(s)): {detail}; {hint}")

    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in build().state_dict().items()}
    found = {name: tuple(t.shape) for name, t in state.items()}
    if expected != found:
        missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
        shaped = sorted(n for n in set(expected) & set(found) if expected[n] != found[n])
        detail = (f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}" if extra
                  else f"{shaped[0]} is {list(found[shaped[0]])}, the card says {list(expected[shaped[0]])}")
        raise mismatch(detail)
    net = build()
    try:
        net.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        raise mismatch(str(exc).splitlines()[0]) from None
    return net.eval()


def _read_weights(path: Path, hint: str) -> dict[str, Any]:
    import torch

    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise ModelCardMismatchError(f"{path}: {size} bytes, more than a weights file can be "
                                     f"({MAX_WEIGHTS_BYTES}); {hint}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- truncated, not a checkpoint, or refused unpickling
        raise ModelCardMismatchError(f"{path}: cannot be loaded as weights ({_load_failure(exc)}); "
                                     f"{hint}") from None
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ModelCardMismatchError(f"{path}: not a state dict of tensors (an older checkpoint format?); "
                                     f"{hint}")
    return state


#: Sentences of torch's weights_only refusal that advise loading the file anyway (with
#: weights_only=False, or by allowlisting its globals); a file that needs either is not a state
#: dict of tensors, and following the advice could run code from it.
_UNSAFE_ADVICE = ("weights_only", "safe_globals", "trusted source", "documentation", "file an issue")


def _load_failure(exc: Exception) -> str:
    """Why torch.load(weights_only=True) failed, in one line, without torch's unsafe advice."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    if "Weights only load failed" not in text:
        return text.splitlines()[0]
    found = re.search(r"WeightsUnpickler error: (.+?)(?:\.\s|\.?$)", text, re.S)
    sentences = [found.group(1)] if found else [
        part.strip().rstrip(".") for part in re.split(r"(?<=\.)\s+", text)
        if part.strip() and not part.startswith("Weights only load failed")
        and not any(word in part for word in _UNSAFE_ADVICE)]
    reason = sentences[0] if sentences else "it holds objects other than tensors"
    return f"it holds more than tensors, which are all a weights file may hold: {reason}"


def _same_architecture(key: str, spec: DeviceSpec) -> bool:
    from kernel_select.device import KNOWN_DEVICES

    other = KNOWN_DEVICES.get(key)
    return other is not None and other.architecture == spec.architecture
