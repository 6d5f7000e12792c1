"""One collection plan timed on one GPU and on every GPU of one host: results/<NAME>.json.

Each run starts from an empty Triton cache and compiles everything it times, with the same wall bound
(or none, and the plan's end). On a host with N GPUs:

    bash data/collect.sh PLAN DIR/gpus1/rows.parquet 1 15     # one GPU, a 16-core host's compile pool
    bash data/collect.sh PLAN DIR/gpusN/rows.parquet N        # N GPUs fed by one pool of every other core
    python results/collection_scaling.py PLAN DIR NAME        # results/NAME.json, from the runs' logs and rows

The one-GPU rows are kept beside the JSON (NAME_one_gpu.parquet) for the agreement figures: the same
problems timed twice, on different GPUs of one host. The results:

    two_gpus_h100       data/shapes_bmm_h100.json to its end, two H100s and 32 cores (31 and 30 workers);
                        its two-GPU rows are data/h100_bmm.parquet
    four_gpus_h200      data/shapes_unseen.json for 140 s each, four H200s and 64 cores (15 and 60 workers)
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

from kernel_select.offline.data import dataset
from kernel_select.offline.data.agreement import agreement
from kernel_select.offline.harness import gpu_tally

HERE = Path(__file__).resolve().parent


def only(folder: Path, pattern: str) -> Path:
    """The one file of `folder` matching `pattern` (a run folder holds one run)."""
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one {pattern}, found {len(found)}")
    return found[0]


def run(folder: Path) -> tuple[dict, pd.DataFrame]:
    """A run folder's closing figures (from its bench log) and its rows."""
    log = only(folder, "bench*.log")
    summary = gpu_tally.run_summary(log.read_text())
    if summary is None:
        raise SystemExit(f"{log}: no closing summary line; did the run finish?")
    return summary, dataset.read(only(folder, "*.parquet"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", help="the shapes file both runs collected")
    parser.add_argument("runs", type=Path, help="the folder of the two runs: gpus1/ and gpus<N>/")
    parser.add_argument("name", help="the result's name: results/<name>.json")
    args = parser.parse_args()
    many_folder = max((p for p in args.runs.glob("gpus*") if p.name != "gpus1"), key=lambda p: int(p.name[4:]),
                      default=None)
    if many_folder is None:
        raise SystemExit(f"{args.runs}: no gpus<N>/ folder beside gpus1/")
    (one, rows_one), (many, rows_many) = run(args.runs / "gpus1"), run(many_folder)
    report = {
        "plan": args.plan,
        "device": str(rows_many["device_name"].iloc[0]),
        "timestamp": str(rows_many["timestamp"].min()),
        "one_gpu": one, "all_gpus": many,
        "speedup_rows_per_minute": round(many["rows_per_minute"] / one["rows_per_minute"], 3),
        "agreement": agreement(rows_one, rows_many).as_json(),
    }
    (HERE / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    shutil.copyfile(only(args.runs / "gpus1", "*.parquet"), HERE / f"{args.name}_one_gpu.parquet")
    print(json.dumps({k: report[k] for k in ("speedup_rows_per_minute", "agreement")}, indent=1))


if __name__ == "__main__":
    main()
