"""Whether the GEMM Inductor is lowering feeds a pointwise epilogue that cuBLAS would leave as a
kernel of its own.

Inductor fuses pointwise consumers of a Triton GEMM template into the template's epilogue (a
biased `nn.Linear` followed by ReLU compiles to one `triton_tem_fused_addmm_relu` kernel). Beside
an ATen (cuBLAS) choice the same consumers run as a separate pointwise kernel: one more launch,
and one more read and write of the GEMM's output. The cuBLAS gate compares the GEMMs alone, so
where the GEMM is small the kernel it leaves out can outweigh the GEMMs' own difference: on the
recommendation tower at batch 1 (H100) the gate kept seven biased GEMMs on cuBLAS, and their seven
ReLU kernels (0.0072 ms per step) took the step's device time 3.3% above stock max-autotune's,
which fused them (docs/results.md, "Whole models"). The gate therefore charges cuBLAS for that kernel's launch
(`model.cublas.POINTWISE_KERNEL_MS`) where this module finds one.

It counts only an epilogue that cuBLAS would certainly leave alone: every consumer of the GEMM's
output (looking through views) is pointwise over the same number of elements, and the pointwise
chain ends only at other GEMMs, attention kernels or the graph's outputs, which take no pointwise
prologue from Inductor. A chain that reaches anything else (a reduction such as the next layer's
norm, a concatenation, an index) may fuse into that kernel beside cuBLAS too, so it earns nothing:
a residual add feeding a norm, Llama's down projection, stays as it was.

The graph is read from `V.graph.current_node`, the FX node Inductor is lowering when it asks the
choices handler for candidates. Nothing here raises: a graph it cannot read counts as no epilogue.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from typing import Any

log = logging.getLogger(__name__)

#: FX nodes walked at most per GEMM: a GELU is about ten pointwise nodes; a longer chain is
#: either something else or too long to be sure of, and counts as no epilogue.
MAX_WALK = 48


@functools.lru_cache(maxsize=None)
def _targets(*names: str) -> frozenset[Any]:
    """The aten overloads named (those this torch has), looked up once."""
    import torch

    found = set()
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(torch.ops.aten, packet, None)
        if op is not None and hasattr(op, overload or "default"):
            found.add(getattr(op, overload or "default"))
    return frozenset(found)


def gemm_targets() -> frozenset[Any]:
    """The aten GEMMs the handler ranks (the nodes whose consumers are read)."""
    return _targets("mm.default", "addmm.default", "bmm.default", "baddbmm.default")


def _barrier_targets() -> frozenset[Any]:
    """Consumers that read the epilogue's result from memory whatever produced it: Inductor fuses
    no pointwise prologue into ATen GEMMs, convolutions or attention kernels."""
    return gemm_targets() | _targets(
        "convolution.default", "_scaled_mm.default",
        "_scaled_dot_product_flash_attention.default", "_scaled_dot_product_efficient_attention.default",
        "_scaled_dot_product_cudnn_attention.default", "_flash_attention_forward.default",
        "_efficient_attention_forward.default")


def lowering_has_separate_epilogue(elements: int) -> bool:
    """Whether the GEMM Inductor is lowering now (`V.graph.current_node`, producing `elements`
    output elements at its size hints) feeds a separate pointwise epilogue. False where Inductor's
    epilogue fusion is off, or the node is not such a GEMM (another op lowering through a GEMM)."""
    try:
        from torch._inductor import config
        from torch._inductor.virtualized import V

        node = getattr(V.graph, "current_node", None)
        if not config.epilogue_fusion or node is None or node.op != "call_function":
            return False
        if node.target not in gemm_targets():
            return False
        count = _numel(node)
        if count.is_number and int(count) != elements:
            return False  # not the GEMM whose candidates are being chosen
    except Exception as exc:  # noqa: BLE001 -- no graph handler, or a graph we cannot read
        log.debug("kernel_select: GEMM node unreadable (%s: %s)", type(exc).__name__, exc)
        return False
    return has_separate_epilogue(node)


def has_separate_epilogue(node: Any) -> bool:
    """Whether `node`'s output feeds only a pointwise epilogue that beside cuBLAS would be a
    kernel of its own (module docstring). False for anything it cannot read."""
    try:
        return _separate_epilogue(node)
    except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
        log.debug("kernel_select: GEMM consumers unreadable (%s: %s)", type(exc).__name__, exc)
        return False


def _separate_epilogue(node: Any) -> bool:
    import torch

    elements = _numel(node)
    barriers = _barrier_targets()
    pending: deque[Any] = deque(node.users)
    seen: set[Any] = set()
    pointwise = 0
    while pending:
        user = pending.popleft()
        if user in seen:
            continue
        seen.add(user)
        if len(seen) > MAX_WALK:
            return False
        if user.op == "output" or (user.op == "call_function" and user.target in barriers):
            continue  # reads a finished tensor: the chain ends here
        target = getattr(user, "target", None)
        if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            return False  # getitem of a split, a custom op, ...: not a fusable epilogue
        if torch.Tag.pointwise in target.tags:
            if not _same_numel(_numel(user), elements):
                return False  # broadcasts to more elements: not an epilogue of this GEMM
            pointwise += 1
        elif not _is_view(target):
            return False  # a reduction, a concatenation, ...: the chain may fuse there instead
        pending.extend(user.users)
    return pointwise > 0


def _is_view(target: Any) -> bool:
    """Whether an aten op returns a view of its first argument (no kernel of its own); also
    `_unsafe_view`, the reshape that Inductor's decompositions put after a GEMM without declaring
    it an alias."""
    if target in _targets("_unsafe_view.default"):
        return True
    arguments = target._schema.arguments
    alias = arguments[0].alias_info if arguments else None
    returns = target._schema.returns
    return (alias is not None and not alias.is_write and len(returns) == 1
            and returns[0].alias_info is not None)


def _numel(node: Any) -> Any:
    """The element count of a node's output (an int, or a sympy expression for symbolic sizes)."""
    import sympy

    value = node.meta["val"]
    count: Any = sympy.Integer(1)
    for size in value.shape:
        count = count * (size.node.expr if hasattr(size, "node") else sympy.Integer(int(size)))
    return count


def _same_numel(a: Any, b: Any) -> bool:
    """Equal element counts without installing a guard (sympy only, no SymInt comparison)."""
    import sympy

    return sympy.expand(a - b) == 0
