"""results/zero_benchmark_fallback.json: what the zero-benchmark mode's fallback buys where the model's
domain ends, and whether one alignment class should end it too.

With gemm_topk=1, a GEMM inside the model's domain gets one choice (the cuBLAS decision, else the model's
first config). One outside it is benchmarked: Inductor's own list beside the model's picks and cuBLAS
(decision.py), which costs a Triton compile per config. This scores, per held-out split of each shipped
device's files, against min(cuBLAS, Triton oracle) as measured, what each policy would get:

- `list_picks_cublas`: the fallback (Inductor's DEFAULT list, the model's top 4, cuBLAS);
- `list_cublas`: Inductor's own autotuning (the list and cuBLAS);
- `top4_cublas`: the model's top 4 and cuBLAS, all benchmarked;
- `top4_gated`: the README recipe (cuBLAS alone where the gate predicts it faster, else the above);
- `first_cublas`: a hedge (the model's first config against cuBLAS), one Triton compile;
- `one_choice`: the gate's call, the mode's one choice inside the domain: cuBLAS where the gate predicts
  it faster (single GEMMs, model.cublas.ONE_CHOICE_THRESHOLD), the hedge for a batched GEMM, else the
  model's first config alone. Since this was measured, odd N with odd K gets the hedge too
  (decision.odd_n_and_k);
- `first_alone` and `cublas_alone`: one choice with no decision.

in three groups of problems: outside the domain (`PerformanceModel.domain_gap`), inside it with odd N and
odd K (an alignment class no model trains on: the `family` split holds it out), and the rest inside.
`configs` is the fallback's Triton configs per problem, at most: the list's size plus the 4 picks, which may
repeat some of it.

CPU only, about five minutes:  python results/zero_benchmark_fallback.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kernel_select.decision import odd_n_and_k
from kernel_select.device import get_device
from kernel_select.model import get_model, load_gate
from kernel_select.model.cublas import DEFAULT_MARGIN, ONE_CHOICE_THRESHOLD
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.data.device_rows import device_rows
from kernel_select.offline.metrics import best_in_top_k, geomean, oracle_ms
from kernel_select.offline.training import baseline_scores
from kernel_select.offline.training import evaluate as ev
from kernel_select.offline.training.cublas_fit import problem_ratios, problems_of

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "zero_benchmark_fallback.json"
DEVICES = ("h100", "h200")
HELD_OUT = ("test", "family", "unseen")


def split_groups(device: str, split: str, frame, files) -> dict[str, dict]:
    spec = get_device(device)
    model = get_model("mlp", spec)
    _, rows = device_rows(splits.split_rows(frame, split), spec, files)
    rows = dataset.modelled_layout_rows(rows, "evaluation", ev.evaluated_layouts([model]))
    scored = ev.problem_rows(rows, f"no usable Triton rows in split {split!r}")
    cases = ev.problem_cases(scored.rows, scored.problems)
    top = best_in_top_k(scored.groups, ev.predict_cases(model, cases), scored.runtime, (1, 4))
    listed = baseline_scores.default_best(scored.rows, scored.problems, scored.groups, scored.runtime, spec,
                                          baseline_scores.DEFAULT_LIST_TORCH)
    aten = baseline_scores.aten_ms(rows).reindex(scored.problem_ids).to_numpy(np.float64)
    outside = np.array([bool(model.domain_gap(problem)) for problem, _ in cases])
    odd = np.array([odd_n_and_k(problem) for problem, _ in cases])
    have = np.isfinite(aten)  # a problem without its cuBLAS row cannot be scored against cuBLAS
    # the gate decides single GEMMs only, as in baseline_scores.with_cublas_report
    table = problem_ratios(rows[rows["batch"] == 1]).reindex(scored.problem_ids).dropna(subset=["log_ratio"])
    gate, singles = load_gate(spec), problems_of(table)
    at = scored.problem_ids.get_indexer(table.index)
    gated = np.zeros(len(scored.problem_ids), dtype=bool)  # the recipe's call: Triton skipped
    gated[at] = gate.skips_triton(singles, DEFAULT_MARGIN)
    alone = np.zeros(len(scored.problem_ids), dtype=bool)  # the one choice's call: cuBLAS
    alone[at] = np.exp(gate.predict_log_ratio(singles)) < ONE_CHOICE_THRESHOLD
    batched = (scored.problems["batch"] > 1).to_numpy()
    groups = {"outside": outside, "inside_odd_nk": ~outside & odd, "inside_rest": ~outside & ~odd}
    out = {}
    for name, mask in groups.items():
        mask = mask & have
        if not mask.any():
            continue
        cublas = aten[mask]
        best = np.minimum(oracle_ms(scored.groups, scored.runtime)[mask], cublas)

        def score(fastest: np.ndarray, with_cublas: bool = True) -> float:
            return round(float(geomean(best / (np.minimum(fastest, cublas) if with_cublas else fastest))), 4)

        first, top4, lst = top[mask, 0], top[mask, 1], listed.best_ms[mask]
        one = np.where(alone[mask], cublas, np.where(batched[mask], np.minimum(first, cublas), first))
        out[name] = {"problems": int(mask.sum()),
                     "list_picks_cublas": score(np.minimum(lst, top4)), "list_cublas": score(lst),
                     "top4_cublas": score(top4), "first_cublas": score(first),
                     "top4_gated": score(np.where(gated[mask], cublas, np.minimum(top4, cublas)),
                                         with_cublas=False),
                     "one_choice": score(one, with_cublas=False),
                     "first_alone": score(first, with_cublas=False),
                     "cublas_alone": score(np.full_like(first, np.inf)),
                     "configs": round(float(np.mean(listed.sizes[mask] + 4)), 1)}
    return out


def main() -> None:
    report = {}
    for device in DEVICES:
        files = sorted((ROOT / "data").glob(f"{device}*.parquet"))
        frame = dataset.read_many(files)
        report[device] = {split: split_groups(device, split, frame, files) for split in HELD_OUT}
        for split, groups in report[device].items():
            for name, scores in groups.items():
                print(device, split, name, scores)
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
