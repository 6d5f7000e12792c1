"""results/two_gpus_h100.json: one collection plan timed on one GPU and on two GPUs of one host.

The plan is data/shapes_bmm_h100.json (255 problems, 75,811 rows, 5,741 kernels); each run starts from an
empty Triton cache and compiles everything it times. On a host with two H100s (32 cores):

    OUT=DIR bash data/collect_bmm_h100.sh 1    # one GPU: DIR/gpus1/{bmm_h100.parquet,bench.log}
    OUT=DIR bash data/collect_bmm_h100.sh 2    # two GPUs fed by one compile pool: DIR/gpus2/...
    python results/two_gpus_h100.py DIR        # this file's JSON, from the runs' logs and rows

The two-GPU rows are data/h100_bmm.parquet; the one-GPU rows are kept beside this file
(two_gpus_h100_one_gpu.parquet) for the agreement figures.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

from kernel_select.offline.data import dataset
from kernel_select.offline.data.agreement import agreement

HERE = Path(__file__).resolve().parent
RUN_LINE = re.compile(r"(?P<problems>\d+) problems, (?P<rows>\d+) rows in (?P<wall>[\d.]+) s wall "
                      r"\(compile included; (?P<kernels>\d+) kernels compiled on (?P<workers>\d+) workers\)")
GPU_LINE = re.compile(r"GPU (?P<gpu>\d+): (?P<problems>\d+) problems, (?P<rows>\d+) rows, (?P<rate>\d+) rows per "
                      r"GPU-minute, busy (?P<busy>[\d.]+) s, waited (?P<waited>[\d.]+) s")


def run_summary(log: Path) -> dict:
    """A bench log's closing figures: the run and each GPU."""
    text = log.read_text()
    run = RUN_LINE.search(text)
    if run is None:
        raise SystemExit(f"{log}: no closing summary line; did the run finish?")
    wall, rows = float(run["wall"]), int(run["rows"])
    gpus = [{"gpu": int(m["gpu"]), "problems": int(m["problems"]), "rows": int(m["rows"]),
             "rows_per_gpu_minute": int(m["rate"]), "busy_s": float(m["busy"]),
             "waited_for_kernels_s": float(m["waited"])} for m in GPU_LINE.finditer(text)]
    return {"problems": int(run["problems"]), "rows": rows, "wall_s": wall, "kernels": int(run["kernels"]),
            "compile_workers": int(run["workers"]), "rows_per_minute": round(rows / wall * 60),
            "rows_per_gpu_minute": round(rows / wall * 60 / max(len(gpus), 1)), "gpus": gpus}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="the OUT folder of the two collect_bmm_h100.sh runs")
    args = parser.parse_args()
    one, two = run_summary(args.runs / "gpus1" / "bench.log"), run_summary(args.runs / "gpus2" / "bench.log")
    rows_one, rows_two = (dataset.read(args.runs / name / "bmm_h100.parquet") for name in ("gpus1", "gpus2"))
    report = {
        "plan": "data/shapes_bmm_h100.json",
        "device": str(rows_two["device_name"].iloc[0]),
        "timestamp": str(rows_two["timestamp"].min()),
        "one_gpu": one, "two_gpus": two,
        "speedup_rows_per_minute": round(two["rows_per_minute"] / one["rows_per_minute"], 3),
        "agreement": agreement(rows_one, rows_two).as_json(),
    }
    (HERE / "two_gpus_h100.json").write_text(json.dumps(report, indent=1) + "\n")
    shutil.copyfile(args.runs / "gpus1" / "bmm_h100.parquet", HERE / "two_gpus_h100_one_gpu.parquet")
    print(json.dumps({k: report[k] for k in ("speedup_rows_per_minute", "agreement")}, indent=1))


if __name__ == "__main__":
    main()
