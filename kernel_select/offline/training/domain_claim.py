"""A model card that also claims another card's domain (dtypes, layouts, strata, ranges).

A model fine-tuned from another, or averaged with it, still ranks what the other learnt: its card may
claim the other's domain, so that a GEMM in a stratum only the other trained on is ranked rather than
handed back to Inductor's list. `average-models --fine-tuned-from` (and `calibrate`) claim the start's
domain beside the fine-tune's, the two trained on different rows, so a stratum's counts add up; `train
--claim-init-domain` claims its start's after training on many of the same rows again, so each stratum
keeps the larger count and no problem counts twice.
"""

from __future__ import annotations

import logging
import operator

from kernel_select.model.card import Domain, ModelCard

log = logging.getLogger(__name__)


def card_claiming(own: ModelCard, theirs: ModelCard, *, overlapping: bool = False) -> ModelCard:
    """`own` also claiming the dtypes, layouts and domain of `theirs`: each dimension's range spans
    both, and a stratum's training problems are both cards' together, or, with `overlapping` (the two
    trained on many of the same rows: a fine-tune of this GPU's model on its files again), the larger
    of the two counts, so that no problem counts twice."""
    both = own.dtypes and theirs.dtypes  # an empty list restricts nothing
    return own.model_copy(update={
        "dtypes": list(dict.fromkeys([*own.dtypes, *theirs.dtypes])) if both else [],
        "layouts": sorted(set(own.layouts) | set(theirs.layouts)),
        "domain": domain_union(own.domain, theirs.domain, overlapping=overlapping)})


def domain_union(own: Domain | None, theirs: Domain | None, *, overlapping: bool = False) -> Domain | None:
    if own is None or theirs is None:  # a card from before domains were recorded: keep the one there is
        return own or theirs

    def span(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return min(a[0], b[0]), max(a[1], b[1])

    combine = max if overlapping else operator.add
    strata = {key: combine(own.strata.get(key, 0), theirs.strata.get(key, 0))
              for key in {*own.strata, *theirs.strata}}
    # A card without a work bound bounds nothing, so neither does the union. Say so: a fine-tune of a
    # card written before work was recorded would otherwise ship without the bound, unnoticed.
    work = ({key: max(own.work.get(key, 0.0), theirs.work.get(key, 0.0))
             for key in {*own.work, *theirs.work}} if own.work and theirs.work else {})
    if bool(own.work) != bool(theirs.work):
        log.warning("one of the two cards records no work bound (written before it was recorded), so the "
                    "claimed domain bounds no stratum's work (card.WORK_SLACK); start from a card that "
                    "records it to keep the bound")
    return Domain(strata=dict(sorted(strata.items())), m=span(own.m, theirs.m), n=span(own.n, theirs.n),
                  k=span(own.k, theirs.k), batch=span(own.batch, theirs.batch),
                  work=dict(sorted(work.items())))
