"""The round-3 plan's groups in their order (`schedule()`): which compile classes it draws, how many
problems of each M bucket (quotas), and in what order `bench --order file` collects them.

The strata short of 100 training problems come first: collected with `bench --order file`
(`ORDER=file bash data/collect.sh ...`), a run bounded by --max-seconds fills them before anything
else, at about the cost of the default reuse order (each group is one class, whose kernels are
compiled once in either order; the estimates are in data/README.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from kernel_select.offline.data.plans.round3_groups import (
    OCTAVES, AttentionGroup, Group, LayerGroup, Quotas, RandomGroup,
)


def _attention(dtype: str, quotas: Quotas, rows: Iterable[tuple]) -> list[Group]:
    """Attention groups of `dtype` from rows ("nt", head dim, key alignment[, quotas]) and ("nn" or
    "tn", head dims' alignment, key alignment[, quotas[, residue, experts]]); "tn" groups draw no
    M <= 16 (no decode step runs a backward GEMM)."""
    out: list[Group] = []
    for layout, dim, align, *rest in rows:
        own = rest[0] if rest else quotas
        if layout == "tn":
            own = (0, *own[1:])
        if layout == "nt":
            out.append(AttentionGroup(dtype=dtype, layout=layout, align=align, quotas=own, head_dim=dim))
        else:
            residue, experts = rest[1:3] if len(rest) > 1 else (0, False)
            out.append(AttentionGroup(dtype=dtype, layout=layout, align=align, quotas=own, head_align=dim,
                                      residue=residue, experts=experts))
    return out


#: Random single GEMMs of bf16 and fp16: (layout, N alignment, K alignment, K residue, M alignment
#: in "tn", N bucket, K bucket), in the layouts no random problem was measured in first ("nt", "tn"),
#: each alignment class of N and of K in three groups, never odd N with odd K.
RANDOM_MM: tuple[tuple[str, int, int, int, int, int, int], ...] = (
    ("nt", 1, 2, 0, 1, 0, 0), ("tn", 2, 4, 0, 1, 0, 0), ("nt", 4, 8, 0, 1, 0, 0), ("tn", 8, 16, 64, 2, 0, 0),
    ("nt", 16, 1, 0, 1, 0, 0), ("tn", 1, 8, 0, 4, 0, 0), ("nt", 2, 16, 192, 1, 64, 0),
    ("tn", 4, 1, 0, 8, 0, 0), ("nt", 8, 2, 0, 1, 0, 256), ("tn", 16, 4, 0, 16, 128, 0),
    ("nn", 1, 16, 96, 1, 0, 0), ("nn", 2, 1, 0, 1, 0, 128), ("nn", 4, 2, 0, 1, 0, 0),
    ("nn", 8, 4, 0, 1, 32, 0), ("nn", 16, 8, 0, 1, 0, 0),
)


def schedule() -> list[Group]:
    """The groups of the plan, the strata below 100 training problems first, those that fill most
    strata for the least compile first among them (in `--order file` a bounded run reaches
    them first): batched fp16 (4 strata, kernels of 0.58 core-s), bf16 (3), float32 mm (2, at
    2 core-s a kernel), batched float32 (4, at 3.4); then random single GEMMs and layers at
    users' token counts."""
    groups: list[Group] = []
    groups += _attention("float16", (24, 20, 20, 20), [
        ("nt", 64, 1), ("nn", 16, 1), ("tn", 16, 1, (0, 24, 24, 24)), ("nt", 128, 4),
        ("nn", 16, 16, (24, 20, 20, 12), 0, True), ("nt", 40, 1, (0, 0, 24, 24)), ("nn", 16, 2),
        ("tn", 16, 2, (0, 24, 24, 24)),
    ])
    groups += _attention("bfloat16", (16, 20, 20, 20), [
        ("nt", 128, 1), ("nn", 16, 1), ("tn", 16, 1), ("nt", 64, 2),
        ("nn", 16, 16, (16, 20, 20, 10), 0, True), ("nt", 72, 1, (0, 24, 24, 0)),
        ("nn", 8, 1, (0, 20, 20, 20)), ("tn", 16, 2), ("nt", 256, 4), ("nn", 16, 4), ("nt", 32, 1),
        ("nn", 16, 16, (16, 20, 20, 10), 128, True), ("tn", 8, 1), ("nt", 80, 2, (16, 24, 24, 0)),
        ("nt", 128, 16), ("nn", 16, 8),
    ])
    groups += [RandomGroup(dtype="float32", layout="nn", n_align=16, k_align=16, quotas=(10, 30, 15, 40),
                           octave=128),
               RandomGroup(dtype="float32", layout="nt", n_align=2, k_align=8, quotas=(0, 0, 20, 45)),
               RandomGroup(dtype="float32", layout="tn", n_align=4, k_align=1, quotas=(0, 0, 20, 45),
                           m_align=16)]
    groups += _attention("float32", (34, 24, 24, 28), [
        ("nt", 64, 1), ("nn", 16, 1), ("tn", 16, 1, (0, 28, 28, 30)), ("nt", 128, 2),
        ("nn", 16, 16, (34, 24, 24, 12), 0, True), ("nn", 8, 4, (0, 24, 24, 28)),
    ])
    for i, (layout, n, k, residue, m_align, n_bucket, k_bucket) in enumerate(RANDOM_MM):
        dtype = ("bfloat16", "float16")[i // 2 % 2]  # RANDOM_MM alternates nt and tn: both get both
        groups.append(RandomGroup(dtype=dtype, layout=layout, n_align=n, k_align=k, quotas=(24, 24, 28, 20),
                                  residue=residue, m_align=m_align, n_bucket=n_bucket, k_bucket=k_bucket,
                                  octave=OCTAVES[i % len(OCTAVES)]))
    for i, (dtype, gemm, n, k, residue) in enumerate((
            ("bfloat16", "fwd", 16, 16, 0), ("float16", "dX", 16, 16, 0), ("bfloat16", "dW", 16, 1, 0),
            ("float16", "fwd", 16, 16, 128), ("bfloat16", "dX", 16, 16, 0), ("float16", "dW", 16, 2, 0),
            ("bfloat16", "fwd", 16, 16, 64), ("float16", "fwd", 16, 16, 0))):
        quotas = (0, 0, 40, 40) if gemm == "dW" else (20, 24, 24, 16)
        groups.append(LayerGroup(dtype=dtype, gemm=gemm, n_align=n, k_align=k, quotas=quotas, residue=residue,
                                 octave=OCTAVES[i % len(OCTAVES)]))
    return groups
