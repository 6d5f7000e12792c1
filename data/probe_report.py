import sys, pandas as pd
df = pd.read_parquet(sys.argv[1])
print(df.groupby(["problem_id","status"]).size())
for pid, g in df.groupby("problem_id"):
    g = g.sort_values("runtime_ms")
    print(pid, "cublas", g[g.backend=="aten"][["runtime_ms","runtime_min_ms","n_runs"]].values.tolist())
    print(g[g.backend=="triton"].head(8)[["block_m","block_n","block_k","num_stages","num_warps","runtime_ms","runtime_min_ms","n_runs","status"]].to_string())
    print(g[g.status!="ok"][["block_m","block_n","block_k","num_stages","num_warps","status","error"]].head(5).to_string())
