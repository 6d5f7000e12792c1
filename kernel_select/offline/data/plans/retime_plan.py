"""The re-time plan (data/shapes_retime_h100.json): the problems whose single-sample timings `audit`
flags as host stalls and that no second opinion checked.

`h100.parquet` and the first 1,302 problems of `h100_coverage.parquet` were timed before the harness
re-timed suspect single samples (`audit.SUSPECT_RATIO` times the fastest config of their tile) and
checked for a drained launch backlog; `audit.unconfirmed_suspects` finds their flagged rows. The
harness times whole problems, so the plan lists each such problem once, with its provenance (family,
layer, pass) as measured, in file order. Collected into `data/h100_retime.parquet`, which sorts after
both files, `dataset.read_many("data/h100*.parquet")` keeps its rows for every re-timed problem (a
problem measured in two files keeps the later file's): the whole problem timed by today's harness
replaces the old rows, none of the committed files is rewritten.

`python -m kernel_select.offline.data.plans.retime_plan --out data/shapes_retime_h100.json` writes it and
prints what collecting it costs (harness/cost.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from kernel_select.offline.data import audit, dataset
from kernel_select.offline.data.plans.sampler import shape_class
from kernel_select.offline.data.shapes import Shape, save
from kernel_select.offline.data.splits import DATA_DIR

#: The H100 files audited; only the first two hold rows timed without a second opinion.
AUDITED_FILES = ("h100.parquet", "h100_coverage.parquet", "h100_layers.parquet", "h100_bmm.parquet")
RETIMED_FILE = "h100_retime.parquet"


def retime_shapes(paths: Sequence[Path]) -> list[Shape]:
    """Each problem of `paths` (in file order) with at least one unconfirmed suspect row."""
    out: list[Shape] = []
    for path in paths:
        frame = dataset.read(path)
        flagged = set(frame.loc[audit.unconfirmed_suspects(frame), "problem_id"])
        first = frame[frame["problem_id"].isin(flagged)].drop_duplicates("problem_id")
        for row in first.to_dict("records"):
            shape = Shape(int(row["m"]), int(row["n"]), int(row["k"]), str(row["dtype"]),
                          f"{row['family']} {row['layer']}".strip(), family=str(row["family"]),
                          layer=str(row["layer"]), pass_=str(row["pass"]), layout=str(row["layout"]),
                          op=str(row["op"]), batch=int(row["batch"]))
            out.append(Shape(**{**shape.__dict__, "group": shape_class(shape)}))
    return out


def main(argv: list[str] | None = None) -> int:
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan, reuse_order

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    args = parser.parse_args(argv)
    shapes = retime_shapes([DATA_DIR / name for name in AUDITED_FILES])
    save(shapes, args.out)
    print(f"{args.out}: {len(shapes)} problems")
    planned = plan([s.problem() for s in shapes], get_device("h100"), torch_version="2.11.0")
    for gpus, workers in ((1, 15), (4, 60)):
        print(f"{gpus} H100(s), {workers} compile workers:")
        print("\n".join("  " + line for line in cost.estimate(reuse_order(planned), workers, gpus).lines()))
        runs = cost.bounded_runs(planned, workers, gpus)
        print(f"  in runs of 540 s, each from an empty Triton cache: {len(runs)} runs, "
              f"{sum(r.wall_s for r in runs) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
