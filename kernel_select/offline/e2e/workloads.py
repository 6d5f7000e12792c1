"""The workloads of one `compare-models` run, whatever builds them: the model zoo's
("<architecture>/<phase>", model_zoo.py) and the user's own networks ("<package.module:factory>/
<phase>", user_model.py). The worker processes build theirs through `build_workload`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel_select.offline.e2e import model_zoo, user_model
from kernel_select.offline.e2e.model_zoo import Workload


def select_workloads(models: str | None, factories: Sequence[str] = (), *, train: bool = False) -> list[str]:
    """The workloads named by `--models` (zoo names; all of them when neither it nor a factory is
    given) and by each `--model` factory path (its inference step, or its training step with
    `train`).

    Raises:
        OptionError: for an unknown zoo name, or a factory path not of the form
            "package.module:factory" (what it returns is checked by `check_factories`).
    """
    for path in factories:
        user_model.check_path(path)
    zoo = model_zoo.parse_workloads(models) if models or not factories else []
    phase = "train" if train else "inference"
    users = [user_model.workload_name(path, phase) for path in dict.fromkeys(factories)]
    return zoo + users


def check_factories(factories: Sequence[str]) -> None:
    """Import and call each factory once, so that a bad path, a factory that raises or one that
    returns the wrong thing stops the comparison before any worker starts.

    Raises:
        OptionError: naming the factory and what is wrong.
    """
    import gc

    import torch

    for path in dict.fromkeys(factories):
        user_model.call_factory(path)
        # The network it built is not kept (the workers build their own); nor is the GPU memory
        # it took, which the caching allocator would otherwise hold from them all run long.
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def require_transformers(names: Sequence[str]) -> None:
    """Fail early, with the install hint, when a zoo workload among `names` needs transformers.

    Raises:
        OptionError: when transformers is missing and needed.
    """
    model_zoo.require_transformers([name for name in names if not user_model.is_user_workload(name)])


def build_workload(name: str, *, device: Any, tiny: bool = False, seed: int = 0) -> Workload:
    """Build workload `name` on `device` (`tiny` narrows zoo networks; a factory's is as it is built).

    Raises:
        OptionError: for an unknown workload or a factory that fails.
    """
    if user_model.is_user_workload(name):
        return user_model.build_user_workload(name, device=device, seed=seed)
    return model_zoo.build_workload(name, device=device, tiny=tiny, seed=seed)
