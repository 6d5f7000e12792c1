"""Performance models: the interface and registry, features, the learned MLP, the analytical fallback."""

from kernel_select.model.base import (
    MODELS_DIR_ENV,
    PerformanceModel,
    get_model,
    load_default,
    models_dir,
    register_model,
    registered_models,
)

__all__ = ["MODELS_DIR_ENV", "PerformanceModel", "get_model", "load_default", "models_dir", "register_model",
           "registered_models"]
