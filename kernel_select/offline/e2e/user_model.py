"""A network of the user's own in `compare-models`: `--network package.module:factory`.

The factory is found by import path, as setuptools entry points name a callable ("package.module:
function", or "package.module:Class.method"), from the working directory or PYTHONPATH. It is
called with no arguments and returns one of

  (module, inputs)    inputs: a tuple or list of positional arguments, a dict of keyword
                      arguments, or a single tensor
  UserModel(module, args=(...), kwargs={...}, loss=None)

`module` is a torch.nn.Module. The factory chooses the dtypes and may build anywhere: the
harness moves the module and every tensor among the inputs (inside tuples, lists and dicts too)
to the comparison's device. Each worker process calls the factory once (with the comparison's
seed set first, so random weights are the same in every process) and times one step:

  inference  `module(*args, **kwargs)` under torch.no_grad(), the module in eval mode
  train      the forward in train mode, a scalar loss, its backward and an AdamW step; the loss is
             `loss(output)` when the factory gave one, else the output itself when it is a scalar
             tensor, else its `.loss` when that is a scalar tensor (transformers' outputs given
             labels), else the mean of its first tensor (any gradient reaches every parameter the
             forward used; the step's GEMMs are the same whatever the loss)

Its workload is named "<package.module:factory>/<phase>".
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from kernel_select.errors import OptionError
from kernel_select.offline.e2e.model_steps import inference_steps, training_steps
from kernel_select.offline.e2e.model_zoo import Workload

#: The phases a user's network is timed in.
USER_PHASES = ("inference", "train")
_FORMS = ("return (module, inputs) with inputs a tuple, a dict or a tensor, or "
          "kernel_select.offline.e2e.user_model.UserModel(module, args, kwargs)")


@dataclasses.dataclass
class UserModel:
    """What a factory may return instead of (module, inputs)."""

    module: Any  # torch.nn.Module
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    loss: Callable[[Any], Any] | None = None  # output -> scalar tensor, for the training step


def is_user_workload(name: str) -> bool:
    """Whether a workload name ("<architecture>/<phase>") names a factory, not a zoo architecture."""
    return ":" in name.rsplit("/", 1)[0]


def workload_name(path: str, phase: str) -> str:
    return f"{path}/{phase}"


def check_path(path: str) -> None:
    """Refuse a `--network` value that is not "package.module:attribute" (checked before the
    workloads are named, since a path without ":" would read as a zoo architecture).

    Raises:
        OptionError: naming the path and the form expected.
    """
    module_name, colon, attribute = path.partition(":")
    if not colon or not module_name.strip() or not attribute.strip() or "/" in path:
        raise OptionError(f"--network {path!r}: expected 'package.module:factory', a callable named by "
                          f"import path as in setuptools entry points")


def load_factory(path: str) -> Callable[[], Any]:
    """The callable that "package.module:attribute" names.

    Raises:
        OptionError: naming the path and what is wrong with it.
    """
    check_path(path)
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionError(f"--network {path}: cannot import {module_name!r} ({exc}); run from the folder "
                          f"that holds it or add that folder to PYTHONPATH") from None
    except Exception as exc:  # noqa: BLE001 -- the user's module failed while importing: say so, on one line
        raise OptionError(f"--network {path}: importing {module_name!r} raised {type(exc).__name__}: {exc}") \
            from None
    factory: Any = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise OptionError(f"--network {path}: {module_name!r} has no attribute {attribute!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise OptionError(f"--network {path}: {attribute!r} is a {type(factory).__name__}, not a callable "
                          f"that returns the network")
    return factory


def call_factory(path: str) -> UserModel:
    """Import and call the factory at `path`; its network as a UserModel.

    Raises:
        OptionError: the path does not name a callable, the factory raised, or it returned
            something other than the documented forms.
    """
    factory = load_factory(path)
    try:
        value = factory()
    except Exception as exc:  # noqa: BLE001 -- the user's factory failed: say so, on one line
        raise OptionError(f"--network {path}: the factory raised {type(exc).__name__}: {exc}") from None
    return as_user_model(value, path)


def as_user_model(value: Any, path: str) -> UserModel:
    """A factory's return value as a UserModel.

    Raises:
        OptionError: `value` is none of the forms the module docstring lists.
    """
    import torch

    if isinstance(value, UserModel):
        model = value
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        module, inputs = value
        if isinstance(inputs, torch.Tensor):
            model = UserModel(module, (inputs,))
        elif isinstance(inputs, (tuple, list)):
            model = UserModel(module, tuple(inputs))
        elif isinstance(inputs, dict) and all(isinstance(key, str) for key in inputs):
            model = UserModel(module, (), dict(inputs))
        else:
            raise OptionError(f"--network {path}: the factory's inputs are a {type(inputs).__name__}; "
                              f"{_FORMS}")
    else:
        what = f"a {len(value)}-tuple" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
        raise OptionError(f"--network {path}: the factory returned {what}; {_FORMS}")
    if not isinstance(model.module, torch.nn.Module):
        raise OptionError(f"--network {path}: the factory's module is a {type(model.module).__name__}, "
                          f"not a torch.nn.Module; {_FORMS}")
    if model.loss is not None and not callable(model.loss):
        raise OptionError(f"--network {path}: UserModel.loss is a {type(model.loss).__name__}, not a "
                          "callable")
    return model


def build_user_workload(name: str, *, device: Any, seed: int = 0) -> Workload:
    """The workload `name` ("<package.module:factory>/<phase>") on `device`.

    Raises:
        OptionError: for an unknown phase, or a factory that fails (see `call_factory`).
    """
    import torch

    path, _, phase = name.rpartition("/")
    if phase not in USER_PHASES:
        raise OptionError(f"{name}: unknown phase {phase!r} for a --model network; "
                          f"choose from {', '.join(USER_PHASES)}")
    torch.manual_seed(seed)
    model = call_factory(path)
    module = model.module.to(device)
    args, kwargs = _to_device(model.args, device), _to_device(model.kwargs, device)
    module.train(phase == "train")
    sizes = {"parameters": sum(p.numel() for p in module.parameters()),
             "inputs": [list(t.shape) for t in _tensors((args, kwargs))]}
    if phase == "train":
        loss_of = model.loss or default_loss
        return Workload(name, path, phase, module, sizes,
                        training_steps(module, lambda fn: loss_of(fn(*args, **kwargs))))
    return Workload(name, path, phase, module, sizes, inference_steps(lambda fn: fn(*args, **kwargs)))


def default_loss(output: Any) -> Any:
    """The training step's loss when the factory gave none (module docstring).

    Raises:
        OptionError: the output holds no tensor.
    """
    import torch

    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    first = next(iter(_tensors(output)), None)
    if first is None:
        raise OptionError(f"--train: the network's output ({type(output).__name__}) holds no tensor to take "
                          f"a loss of; return UserModel(module, args, loss=...) from the factory")
    return first.float().mean()


def _to_device(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[Any]:
    """The tensors in `value` (tuples, lists, dicts and transformers' outputs searched), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):  # transformers' ModelOutput is a dict of its non-None fields
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []
