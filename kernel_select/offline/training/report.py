"""Human-readable text of `evaluate` reports."""

from __future__ import annotations

from typing import Any


def format_report(report: dict[str, Any]) -> str:
    """A human-readable table of an `evaluate` report."""
    if "skipped" in report:
        return f"[{report['split']}] skipped: {report['skipped']}"
    ks = report["ks"]
    lines = [f"{report['data']} [{report['split']}] on {report['device']}: {report['problems']} problems, "
             f"{report['rows']} measured Triton configs",
             "score(k) = oracle_ms / best measured ms among top-k, geometric mean over problems",
             f"{'method':<22}" + "".join(f"{'k=' + str(k):>9}" for k in ks)]
    for name, result in report["methods"].items():
        if "skipped" in result:
            lines.append(f"{name:<22}  skipped: {result['skipped']}")
        elif "topk" in result:
            # nvMatmulHeuristics is scored only where a suggestion matched a measured config
            subset = (f"  ({result['problems']} of {report['problems']} problems)"
                      if result.get("problems", report["problems"]) != report["problems"] else "")
            lines.append(f"{name:<22}" + "".join(f"{result['topk'][str(k)]:>9.4f}" for k in ks) + subset)
        elif result.get("score") is not None:
            lines.append(f"{name:<22}  {result['score']:.4f} with k = {result['k']:.1f} "
                         f"(its configs measured: {result['measured_fraction']:.0%})")
    cublas = report["cublas"]
    if cublas.get("problems"):
        lines.append(f"cuBLAS beats the Triton oracle on {cublas['cublas_wins_fraction']:.0%} of "
                     f"{cublas['problems']} problems; geomean cuBLAS/oracle time "
                     f"{cublas['geomean_cublas_over_oracle']:.3f}")
    with_cublas = report.get("with_cublas", {})
    if with_cublas.get("problems"):
        lines.append(f"with cuBLAS always a candidate (as in Inductor), {with_cublas['problems']} problems: "
                     "fastest of (cuBLAS, all Triton) / fastest of (cuBLAS, the method's configs)")
        for name, value in with_cublas["methods"].items():
            if isinstance(value, dict):
                lines.append(f"  {name:<20}" + "".join(f"{value[str(k)]:>9.4f}" for k in ks))
            else:
                lines.append(f"  {name:<20}  {value:.4f}")
        gate = with_cublas.get("gate")
        if gate:
            chosen = gate["margins"].get(f"{gate['margin']:g}", {})
            lines.append(f"  cuBLAS gate (margin {gate['margin']:g}): Triton skipped on "
                         f"{chosen.get('gated', 0):.0%} of problems, wrongly on "
                         f"{chosen.get('wrongly_gated', 0)}; sign accuracy {gate['sign_accuracy']:.3f}")
    if "paired" in report:
        lines.append(format_paired(report["paired"]))
    for name, result in report["methods"].items():
        if "spearman" in result:
            rho = result["spearman"]
            lines.append(f"{name}: Spearman per problem median {rho['median']:.3f} "
                         f"(q25 {rho['q25']:.3f}, q75 {rho['q75']:.3f})")
        for k, worst in result.get("worst", {}).items():
            lines.append(f"{name}: worst problems at k={k}: " + ", ".join(
                f"{w['problem_id']} {w['score']:.3f} ({w['top1']} vs {w['oracle']})" for w in worst))
    return "\n".join(lines)


def format_paired(paired: dict[str, Any]) -> str:
    """The `paired` section of a report: each model's score(k) over the reference's, with its interval."""
    over = f" over the {' and '.join(paired['splits'])} splits together" if "splits" in paired else ""
    lines = [f"paired bootstrap{over}: geomean of score(k) / {paired['reference']}'s, "
             f"{paired['confidence']:.0%} interval (> 1: better than {paired['reference']})"]
    for name, result in paired["methods"].items():
        if "skipped" in result:
            lines.append(f"  {name:<20}  skipped: {result['skipped']}")
            continue
        cells = []
        for k in paired["ks"]:
            r = result["ratio"][str(k)]
            cells.append(f"k={k} {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]")
        lines.append(f"  {name:<20}  " + ", ".join(cells) + f" ({result['problems']} problems)")
    return "\n".join(lines)



def format_pinned(pinned: dict[str, Any]) -> str:
    """One line per held-out split: the shipped model's scores on its pinned slice."""
    lines = []
    for split, result in pinned["splits"].items():
        if "skipped" in result:
            lines.append(f"pinned [{split}] skipped: {result['skipped']}")
            continue
        scores = ", ".join(f"top-{k} {result['topk'][str(k)]:.4f}" for k in pinned["ks"])
        lines.append(f"pinned [{split}] {len(result['problems'])} problems: {scores}, calibration "
                     f"{result['calibration_median_abs_log_top16']:.4f}")
    return "\n".join(lines)
