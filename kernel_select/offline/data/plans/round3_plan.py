"""The round-3 H100 plan (data/shapes_round3_h100.json): problems where the model is weak and users are.

Where the model is weak: the strata of its card (model/card.py: op x dtype x M bucket). Batched GEMMs
above M = 16 had 5 and 19 bf16 training problems and none in fp16 or fp32, batched fp32 9 in all,
fp32 mm above M = 4096 31; the shipped model scored 0.829 top-1 on batched GEMMs it never saw (issue
38). Where users are: attention at token counts that are not multiples of 8, batched experts with few
tokens each, layer GEMMs at the token counts prompts and images have, and shapes no table lists.

The plan is a list of groups (round3_groups.py: attention, experts, random and layers), each one
compile class so that its problems share every compiled binary, and each drawing a quota of problems
per M bucket of the card. Its modules, by job:

  round3_sources.py   the attention blocks and MoE expert layers of the architecture table
  round3_groups.py    the kinds of group and how each draws a problem of its class
  round3_schedule.py  the groups, their quotas and their order (`schedule()`)
  round3_strata.py    what the plan must not draw, and the card strata it fills (`strata_table`)
  round3_plan.py      drawing the plan (`fill`, `round3_plan`), its cost and the command line

Never drawn (round3_strata.py): a problem of MEASURED_FILES, of the `unseen` split
(data/shapes_unseen.json), of a held-out family or of odd N with odd K (the `family` split: not
trainable), or one drawn before. Every problem's operands fit 32-bit offsets
(bench_plan.check_benchmarkable) and its fastest config is estimated under
round3_groups.MAX_FASTEST_S (harness/cost.py), so no problem's ~1,000 configs take long. Every
group draws from its own random stream (seeded by SEED and its name), so editing one group leaves
the others' problems as they were (but for a problem both would draw: the first keeps it).

`python -m kernel_select.offline.data.plans.round3_plan --out data/shapes_round3_h100.json` writes the
plan and prints its composition, the strata it brings to 100 training problems, and what
collecting it costs (harness/cost.py), whole and run by run of `data/collect.sh` (minutes).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.plans.round3_groups import Group
from kernel_select.offline.data.plans.round3_schedule import schedule
from kernel_select.offline.data.plans.round3_strata import (
    DATA_DIR, STRATUM_TARGET, composition, excluded_ids, held_out, measured_training_strata, strata_table,
)
from kernel_select.offline.data.shapes import Shape, save

#: The plan's own seed ("round3" in ASCII); the unseen split's generator has another.
SEED = 0x726F756E6433
DRAWS = 60  # tries per wanted problem before a group's bucket settles for fewer


def fill(group: Group, excluded: set[str], seed: int = SEED) -> list[Shape]:
    """The group's problems: up to its quota per M bucket (taken in turn, so a prefix holds each
    bucket), none in `excluded` (which gains them) and none held out in the `family` split."""
    rng = random.Random(f"{seed}:{group.name}")
    wanted = list(group.quotas)
    tries = [DRAWS * q for q in wanted]
    out: list[Shape] = []
    while any(w > 0 and t > 0 for w, t in zip(wanted, tries)):
        for bucket in range(len(wanted)):
            while wanted[bucket] > 0 and tries[bucket] > 0:
                tries[bucket] -= 1
                shape = group.draw(rng, bucket)
                if shape is None:
                    continue
                pid = id_of(shape.problem())
                if pid in excluded or held_out(shape):
                    continue
                excluded.add(pid)
                out.append(shape)
                wanted[bucket] -= 1
                break
    return out


def round3_plan(data_dir: Path = DATA_DIR, seed: int = SEED) -> list[Shape]:
    """data/shapes_round3_h100.json: every group of `schedule()` filled, in schedule order."""
    excluded = excluded_ids(data_dir)
    return [shape for group in schedule() for shape in fill(group, excluded, seed)]


#: The hosts the cost is estimated for: (GPUs, compile workers): one H100 of a 16-core host, and the
#: four H100s of a 64-core host (collect.sh's default: a core per timing process).
HOSTS = ((1, 15), (4, 60))
#: collect.sh's MAX_SECONDS: a run fits one device call of 10 minutes with its start and summary.
RUN_SECONDS = 540.0


def cost_lines(shapes: Sequence[Shape], hosts: Iterable[tuple[int, int]] = HOSTS,
               run_seconds: float = RUN_SECONDS) -> list[str]:
    """What collecting the plan costs on each host (harness/cost.py): the whole plan in one run, and
    run by run of `run_seconds` in file order (`bench --order file`), from an empty Triton cache
    each (collect.sh's default) and with the cache kept between runs, with the strata still under
    STRATUM_TARGET after each run; and in the harness's default reuse order."""
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan

    planned = plan([s.problem() for s in shapes], get_device("h100"), torch_version="2.11.0")
    today = measured_training_strata()
    out = []
    for gpus, workers in hosts:
        out.append(f"{gpus} H100(s), {workers} compile workers, the whole plan in one run:")
        out += ["  " + line for line in cost.estimate(planned, workers, gpus).lines()]
        for order, keep in (("file", False), ("file", True), ("reuse", False)):
            runs = cost.bounded_runs(planned, workers, gpus, run_seconds, keep_cache=keep, order=order)
            cache = "the Triton cache kept between runs" if keep else "each from an empty Triton cache"
            out.append(f"  in runs of {run_seconds:.0f} s, --order {order}, {cache}: {len(runs)} runs, "
                       f"{sum(r.wall_s for r in runs) / 60:.1f} min")
            if order != "file":
                continue
            done = 0
            for i, r in enumerate(runs, 1):
                done += r.problems
                short = sum(own < STRATUM_TARGET for _, _, _, own, _ in strata_table(shapes[:done], today))
                out.append(f"    run {i}: {r.problems} problems, {r.rows} rows, {r.keys} kernels compiled "
                           f"for them, {r.wall_s:.0f} s, {r.rows_per_gpu_minute():.0f} rows per GPU-minute; "
                           f"strata under {STRATUM_TARGET} after it: {short}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    parser.add_argument("--no-cost", action="store_true",
                        help="skip the cost estimate (planning every config of the plan takes minutes)")
    args = parser.parse_args(argv)
    planned = round3_plan()
    save(planned, args.out)
    print(f"{args.out}: {len(planned)} problems in {len({s.group for s in planned})} groups")
    for name, counts in composition(planned).items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("training problems per stratum: today + this plan = total; as the card counts (dtype twin's too)")
    for key, today, added, total, counted in strata_table(planned, measured_training_strata()):
        flag = "" if counted >= STRATUM_TARGET else f"  < {STRATUM_TARGET}"
        print(f"  {key:22s} {today:5d} + {added:4d} = {total:5d}   card {counted:5d}{flag}")
    if not args.no_cost:
        print("\n".join(cost_lines(planned)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
