"""Performance models: the interface and registry, features, one checkpoint format, the learned MLP,
the analytical fallback and the cuBLAS gate."""

from kernel_select.model.base import (
    MODELS_DIR_ENV,
    PerformanceModel,
    get_model,
    load_default,
    models_dir,
    register_model,
    registered_models,
    shipped_model_dir,
)

__all__ = ["MODELS_DIR_ENV", "PerformanceModel", "get_model", "load_default", "models_dir", "register_model",
           "registered_models", "shipped_model_dir"]
