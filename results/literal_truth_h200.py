"""results/literal_truth_h200.json: the shipped H200 model scored against Inductor-faithful truth.

The H200 model learnt from rows timed with shared binaries (sizes passed at run time); Inductor runs
kernels with the sizes compiled in. data/h200_literal.parquet re-times small-M problems the second way
(`bench --literal-sizes`). This scores the shipped model, Inductor's DEFAULT list and the shared truth's
own oracle on the same problems against both truths, split by split:

- `literal` / `shared`: `kernel-select eval` on the literal rows and on the shared rows of the same problems;
- `shared_oracle_in_literal`: per problem, the literal time of the config that is fastest by the shared
  rows over the literal oracle (geometric mean): the best any model that ranks like the shared rows can do;
- `literal_over_shared`: how much faster the literal times are: the literal oracle over the shared one
  (geometric mean over problems), and per (problem, config) the median literal / shared time, overall and
  by pipeline stages.

CPU only, about a minute:  python results/literal_truth_h200.py
`--mlp-dir DIR --out FILE` scores another model folder the same way:
results/literal_truth_h200_previous.json is an H200 model that learnt these problems from their shared
rows only (models/h200 at commit 9a2d3bc, written out with `git show`; its "model" field names that commit).
`--literal FILE` scores another literal-size file: results/literal_truth_h200_m17_32.json is
`--literal data/h200_literal_m17_32.parquet --out results/literal_truth_h200_m17_32.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.offline.data import dataset

ROOT = Path(__file__).resolve().parent.parent
LITERAL = ROOT / "data" / "h200_literal.parquet"
OUT = ROOT / "results" / "literal_truth_h200.json"
CONFIG = ["block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m"]


def shared_rows(problem_ids: set[str]) -> pd.DataFrame:
    """The shared-binary rows of the same problems, from every H200 file that is not a literal-size one
    (read together, a literal file's rows would replace the shared ones)."""
    files = sorted(p for p in (ROOT / "data").glob("h200*.parquet") if not p.name.startswith("h200_literal"))
    rows = dataset.read_many(files)
    return rows[rows["problem_id"].isin(problem_ids)]


def evaluate(parquet: Path, split: str, mlp_dir: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "eval.json"
        model = ["--mlp-dir", mlp_dir] if mlp_dir else []  # none: the model that serves the device
        subprocess.run([sys.executable, "-m", "kernel_select.cli", "eval", "--data", str(parquet),
                        "--split", split, "--json-out", str(out), *model], check=True, capture_output=True)
        report = json.loads(out.read_text())
    splits = report["splits"] if "splits" in report else {split: report}
    return {name: summary(s) for name, s in splits.items()}


def summary(split: dict) -> dict:
    mlp = split["methods"]["mlp"]
    return {
        "problems": split["problems"],
        "mlp_topk": {k: round(v, 4) for k, v in mlp["topk"].items() if k in ("1", "2", "4", "16")},
        "inductor_default": round(split["methods"]["inductor_default"]["score"], 4),
        "mlp_spearman_median": round(mlp["spearman"]["median"], 3),
        "mlp_calibration": round(mlp["calibration_median_abs_log_top16"], 4),
        "with_cublas": {"mlp_top1": round(split["with_cublas"]["methods"]["mlp"]["1"], 4),
                        "inductor_default": round(split["with_cublas"]["methods"]["inductor_default"], 4)},
    }


def triton_times(df: pd.DataFrame) -> pd.Series:
    """Measured Triton runtimes indexed by (problem_id, config)."""
    df = df[(df["backend"] == "triton") & np.isfinite(df["runtime_ms"])]
    return df.set_index(["problem_id", *CONFIG])["runtime_ms"]


def geomean(ratios: pd.Series) -> float:
    return round(float(np.exp(np.log(ratios).mean())), 4)


def literal_over_shared(literal: pd.DataFrame, shared: pd.DataFrame) -> dict:
    """The literal oracle over the shared one, and the median per-config literal / shared time."""
    lit, sh = triton_times(literal), triton_times(shared)
    oracles = lit.groupby(level="problem_id").min() / sh.groupby(level="problem_id").min()
    both = pd.concat({"literal": lit, "shared": sh}, axis=1, join="inner")
    per_config = both["literal"] / both["shared"]
    by_stages = per_config.groupby(level="num_stages").median()
    return {"oracle_geomean": geomean(oracles.dropna()), "configs": int(len(per_config)),
            "config_median": round(float(per_config.median()), 4),
            "config_median_by_stages": {int(s): round(float(r), 4) for s, r in by_stages.items()}}


def shared_oracle_in_literal(literal: pd.DataFrame, shared: pd.DataFrame) -> dict:
    """Overall and per hash split: the literal time of the shared oracle's config over the literal oracle."""
    lit, sh = triton_times(literal), triton_times(shared)
    best_shared = sh.groupby(level="problem_id").idxmin()
    ratios = {}
    for pid, key in best_shared.items():
        if key in lit.index:
            ratios[pid] = lit.loc[pid].min() / lit.loc[key]
    splits = literal.drop_duplicates("problem_id").set_index("problem_id")["split"]
    ratios = pd.Series(ratios)
    groups = {"all": ratios, **dict(list(ratios.groupby(splits.reindex(ratios.index).values)))}
    return {name: {"problems": int(len(r)), "geomean": geomean(r),
                   "exact": round(float((r >= 0.9999).mean()), 3)} for name, r in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlp-dir", help="model folder to score (default: the shipped H200 model)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"JSON to write (default: {OUT.name})")
    parser.add_argument("--literal", type=Path, default=LITERAL,
                        help=f"literal-size file to score against (default: data/{LITERAL.name})")
    args = parser.parse_args()
    literal = dataset.read(args.literal)
    shared = shared_rows(set(literal["problem_id"]))
    result = {"data": args.literal.name, "model": args.mlp_dir or "models/h200",
              "problems": int(literal["problem_id"].nunique()), "rows": len(literal), "truths": {}}
    with tempfile.TemporaryDirectory() as tmp:
        shared_path = Path(tmp) / "shared_same_problems.parquet"
        shared.to_parquet(shared_path)
        for truth, path in (("literal", args.literal), ("shared", shared_path)):
            result["truths"][truth] = {}
            for split in ("train", "val", "held-out"):
                result["truths"][truth].update(evaluate(path, split, args.mlp_dir))
    result["shared_oracle_in_literal"] = shared_oracle_in_literal(literal, shared)
    result["literal_over_shared"] = literal_over_shared(literal, shared)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for split in result["truths"]["literal"]:
        lit, sh = result["truths"]["literal"][split], result["truths"]["shared"][split]
        print(f"{split:7s} {lit['problems']:4d} problems  mlp top-1/top-4 literal "
              f"{lit['mlp_topk']['1']:.3f}/{lit['mlp_topk']['4']:.3f} shared "
              f"{sh['mlp_topk']['1']:.3f}/{sh['mlp_topk']['4']:.3f}  DEFAULT literal "
              f"{lit['inductor_default']:.3f} shared {sh['inductor_default']:.3f}")
    print("shared oracle in literal truth:", result["shared_oracle_in_literal"])
    print("literal over shared:", result["literal_over_shared"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
