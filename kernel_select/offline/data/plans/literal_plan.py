"""The literal-size re-collection plans (data/shapes_literal_h200*.json): H200 problems already measured
with shared binaries, to be timed again as Inductor's kernels run (`bench --literal-sizes`).

The harness shares one binary per config across shapes; Inductor compiles M, N and K in. For
memory-bound GEMMs that times some configs otherwise (docs/results.md, "Harness fidelity": on an H200
the shared binaries rank configs at a median Spearman of 0.976 against Inductor's own timing, literal
sizes at 0.996; at M <= 16 the shared ones fall as low as 0.09). A plan is every single GEMM (mm) of an
M range (M <= 16 by default) in bfloat16 and float16 of the H200 files, every split (train and val to
learn from, test, family and unseen to score against Inductor's truth), in the layouts the models read
(not `tt`), each with its provenance as measured. The order is a fixed shuffle, so that a bounded run
(collect it with ORDER=file) times a random sample of the whole. The M <= 16 plan is collected into
`data/h200_literal.parquet`; `dataset.read_many` then reads a problem's literal-size rows in place of
its shared-binary ones, whatever the files' order.

`python -m kernel_select.offline.data.plans.literal_plan --out data/shapes_literal_h200.json` writes it and
prints what collecting it costs (harness/cost.py); `--min-m 17 --max-m 32 --out
data/shapes_literal_h200_m17_32.json` writes the next range's (collected into
`data/h200_literal_m17_32.parquet`).
"""

from __future__ import annotations

import argparse
import zlib

import pandas as pd

from kernel_select.offline.data import dataset
from kernel_select.offline.data.shapes import Shape, save
from kernel_select.offline.data.splits import DATA_DIR

#: The H200 files planned from: named, not globbed, so that the literal-size file the plan is collected
#: into (or any later file) leaves the plan as it was written.
PLANNED_FILES = ("h200.parquet", "h200_bmm.parquet", "h200_heads.parquet", "h200_layers_fp32.parquet",
                 "h200_round3.parquet", "h200_round3_fp32.parquet", "h200_unseen.parquet")
MIN_M, MAX_M = 1, 16
DTYPES = ("bfloat16", "float16")
LAYOUTS = ("nn", "nt", "tn")  # `tt` is outside every model's layouts


def literal_shapes(frame: pd.DataFrame, min_m: int = MIN_M, max_m: int = MAX_M) -> list[Shape]:
    """The plan's problems of `frame` with min_m <= M <= max_m, once each, in the plan's fixed order."""
    chosen = frame[frame["m"].between(min_m, max_m) & frame["dtype"].isin(DTYPES) & (frame["op"] == "mm")
                   & frame["layout"].isin(LAYOUTS)]
    first = chosen.drop_duplicates("problem_id")
    # crc32 of the id: an order that does not move when problems are added to or dropped from the files
    first = first.assign(order=[zlib.crc32(pid.encode()) for pid in first["problem_id"]])
    return [Shape(int(r["m"]), int(r["n"]), int(r["k"]), str(r["dtype"]),
                  f"{r['family']} {r['layer']}".strip(), family=str(r["family"]), layer=str(r["layer"]),
                  pass_=str(r["pass"]), layout=str(r["layout"]))
            for r in first.sort_values(["order", "problem_id"]).to_dict("records")]


def main(argv: list[str] | None = None) -> int:
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    parser.add_argument("--min-m", type=int, default=MIN_M, help=f"smallest M (default: {MIN_M})")
    parser.add_argument("--max-m", type=int, default=MAX_M, help=f"largest M (default: {MAX_M})")
    args = parser.parse_args(argv)
    if not 1 <= args.min_m <= args.max_m:
        parser.error(f"need 1 <= --min-m <= --max-m, got {args.min_m} and {args.max_m}")
    shapes = literal_shapes(dataset.read_many([DATA_DIR / name for name in PLANNED_FILES]),
                            args.min_m, args.max_m)
    save(shapes, args.out)
    by = pd.DataFrame([{"dtype": s.dtype, "layout": s.layout} for s in shapes])
    print(f"{args.out}: {len(shapes)} problems; {by.groupby(['dtype', 'layout']).size().to_dict()}")
    planned = plan([s.problem() for s in shapes], get_device("h200"), torch_version="2.11.0",
                   literal_sizes=True)
    for workers, gpus in ((15, 1), (30, 2), (60, 4)):
        print(f"{gpus} GPU(s), {workers} compile workers:")
        for line in cost.estimate(planned, workers, gpus).lines()[:2]:
            print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
