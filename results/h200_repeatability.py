"""How closely the dataset harness repeats itself: the same 235 H200 problems timed twice.

results/h200_repeat_one_gpu.parquet holds them timed on one GPU alone; data/h200.parquet holds the
same problems timed again, spread over two GPUs of the same machine, minutes apart. Prints, per
config, the spread of runtime_ms between the two; per problem, how the fastest Triton time moves;
and the score (oracle / measured) that the first timing's fastest config gets in the second.

    python results/h200_repeatability.py        (CPU, a few seconds; needs pandas)
"""

import numpy as np
import pandas as pd

KEY = ["problem_id", "block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m"]

first = pd.read_parquet("results/h200_repeat_one_gpu.parquet")
first = first[first.backend == "triton"]
second = pd.read_parquet("data/h200.parquet")
second = second[(second.backend == "triton") & second.problem_id.isin(first.problem_id.unique())]

pairs = first.merge(second, on=KEY, suffixes=("_first", "_second"))
log_ratio = np.log(pairs.runtime_ms_second / pairs.runtime_ms_first)
print(f"{pairs.problem_id.nunique()} problems, {len(pairs)} configs timed twice")
print(f"per config: median |log ratio| {np.median(np.abs(log_ratio)):.4f}, "
      f"90th percentile {np.quantile(np.abs(log_ratio), 0.9):.4f}, geomean ratio {np.exp(log_ratio.mean()):.4f}")

best_first = first.groupby("problem_id").runtime_ms.min()
best_second = second.groupby("problem_id").runtime_ms.min()
best_ratio = np.log(best_second / best_first)
print(f"per problem, fastest Triton time: geomean ratio {np.exp(best_ratio.mean()):.4f}, "
      f"worst {np.exp(np.abs(best_ratio)).max():.3f}x")

picked = first.loc[first.groupby("problem_id").runtime_ms.idxmin(), KEY].merge(second, on=KEY)
score = best_second[picked.problem_id].to_numpy() / picked.runtime_ms.to_numpy()
print(f"the first timing's fastest config, scored in the second: geomean {np.exp(np.log(score).mean()):.3f}, "
      f"worst {score.min():.3f}")
