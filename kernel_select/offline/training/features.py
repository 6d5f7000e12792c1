"""Features of whole dataset frames for training: the columns of kernel_select.model.features
computed over every row at once (the same `feature_columns` inference uses, so the two cannot drift)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec, get_device
from kernel_select.layouts import check_layout
from kernel_select.model.features import FEATURE_SETS, feature_columns, stack_columns
from kernel_select.problem import DTYPE_BYTES, dtype_name


def featurize_frame(df: pd.DataFrame, device: DeviceSpec | str, version: int) -> np.ndarray:
    """float32 (len(df), len(FEATURE_SETS[version])) for a frame with the dataset's columns (m, n, k,
    dtype, layout, the config columns, batch for version 5, allow_tf32 where it has it;
    dataset.COLUMNS)."""
    names = FEATURE_SETS[version]
    layouts = df["layout"].astype(str) if "layout" in df.columns else pd.Series("nn", index=df.index)
    for layout in layouts.unique():
        check_layout(layout)

    def col(name: str) -> np.ndarray:
        return df[name].to_numpy(np.float64)

    dtype_bytes = df["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]).to_numpy(np.float64)
    batch = col("batch") if version >= 5 and "batch" in df.columns else np.float64(1.0)
    tf32 = df["allow_tf32"].to_numpy(np.float64) if "allow_tf32" in df.columns else np.float64(0.0)
    columns = feature_columns(col("m"), col("n"), col("k"), dtype_bytes,
                              (layouts.str[0] == "t").to_numpy(np.float64),
                              (layouts.str[1] == "t").to_numpy(np.float64),
                              col("block_m"), col("block_n"), col("block_k"), col("num_stages"),
                              col("num_warps"), col("group_m"), get_device(device), batch, tf32)
    return stack_columns(columns[: len(names)], len(df))
