"""Conversion to and from torch._inductor.lookup_table's dict format."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import LUTError
from kernel_select.lut.torch_table import from_inductor_table, to_inductor_table
from kernel_select.lut import (
    BatchedLUTEntry,
    KernelLUT,
    load_lut,
    lut_from_rows,
    LUTEntry,
    LUTRow,
    MRange,
    SizeRange,
)

SEED = Path(__file__).resolve().parents[2] / "luts" / "h100_seed.json"
SEED_KEY = "((torch.bfloat16, [560, 3420], [3420, 1]), (torch.bfloat16, [3420, 1280], [1280, 1]))+mm"
TEMPLATE_KWARGS_2_11 = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EVEN_K",
                        "ACC_TYPE", "USE_FAST_ACCUM"}


def cfg(bm: int, bn: int, bk: int, stages: int, warps: int) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=stages, num_warps=warps)


def all_ops_lut() -> KernelLUT:
    configs = [cfg(64, 128, 64, 3, 4), cfg(32, 32, 128, 2, 2)]
    return lut_from_rows([
        LUTRow("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, configs=configs)),
        LUTRow("h100", "addmm", "float16", LUTEntry(m=7, n=8, k=4096, configs=configs[:1])),
        LUTRow("h100", "bmm", "float32", BatchedLUTEntry(m=64, n=32, k=128, batch=4, configs=configs)),
        LUTRow("h100", "baddbmm", "bfloat16", BatchedLUTEntry(m=3, n=5, k=7, batch=2, configs=configs[1:])),
    ])


def test_seed_exports_torch_keys_with_every_template_kwarg():
    table = to_inductor_table(load_lut(SEED))
    assert SEED_KEY in table
    first, second, aten = table[SEED_KEY]
    assert first == {"template_id": "triton::mm", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                     "num_stages": 5, "num_warps": 8, "EVEN_K": False, "ACC_TYPE": "tl.float32",
                     "USE_FAST_ACCUM": False}
    assert second["template_id"] == "triton::mm" and second["num_stages"] == 4
    assert aten == {"template_id": "aten::mm"}
    assert len(table) == 3
    named = to_inductor_table(load_lut(SEED), "NVIDIA H100 80GB HBM3", keep_aten=False)
    assert named["NVIDIA H100 80GB HBM3+" + SEED_KEY] == [first, second]


def test_keys_match_str_of_inductors_node_tuples():
    torch = pytest.importorskip("torch")
    expected = str(((torch.bfloat16, [560, 3420], [3420, 1]), (torch.bfloat16, [3420, 1280], [1280, 1])))
    assert SEED_KEY == expected + "+mm"


def test_keys_match_lookup_table_choices_key_generation():
    # The real key function of torch._inductor.lookup_table, fed a stand-in for KernelInputs.
    torch = pytest.importorskip("torch")
    choices = pytest.importorskip("torch._inductor.lookup_table.choices")

    class Inputs:
        def __init__(self, nodes, scalars=None):
            self.nodes, self._scalars = nodes, scalars or {}

        def dtypes(self):
            return [dtype for dtype, _, _ in self.nodes]

        def shapes_hinted(self):
            return [tuple(shape) for _, shape, _ in self.nodes]

        def strides_hinted(self):
            return [tuple(stride) for _, _, stride in self.nodes]

    key_of = choices.LookupTableChoices._generate_kernel_inputs_key
    table = to_inductor_table(all_ops_lut(), keep_aten=False)
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    expected = [
        key_of(Inputs([(bf16, [560, 3420], [3420, 1]), (bf16, [3420, 1280], [1280, 1])])) + "+mm",
        key_of(Inputs([(f16, [7, 8], [0, 1]), (f16, [7, 4096], [4096, 1]), (f16, [4096, 8], [8, 1])],
                      {"alpha": 1, "beta": 1})) + "+addmm",
        key_of(Inputs([(f16, [7, 8], [8, 1]), (f16, [7, 4096], [4096, 1]), (f16, [4096, 8], [8, 1])],
                      {"beta": 1, "alpha": 1})) + "+addmm",
        key_of(Inputs([(f32, [4, 64, 128], [8192, 128, 1]), (f32, [4, 128, 32], [4096, 32, 1])])) + "+bmm",
        key_of(Inputs([(bf16, [2, 3, 5], [15, 5, 1]), (bf16, [2, 3, 7], [21, 7, 1]),
                       (bf16, [2, 7, 5], [35, 5, 1])],
                      {"alpha": 1, "beta": 1})) + "+baddbmm",
    ]
    for key in expected:
        assert key in table, key


def test_template_ids_and_even_k_follow_the_problem():
    table = to_inductor_table(all_ops_lut(), keep_aten=False)
    by_op = {key.rsplit("+", 1)[1]: entries for key, entries in table.items()}
    assert {e["template_id"] for e in by_op["mm"] + by_op["addmm"]} == {"triton::mm"}
    assert {e["template_id"] for e in by_op["bmm"] + by_op["baddbmm"]} == {"triton::bmm"}
    assert by_op["addmm"][0]["EVEN_K"] is True  # 4096 % 64 == 0
    assert [e["EVEN_K"] for e in by_op["bmm"]] == [True, True]  # 128 % 64, 128 % 128
    assert all(set(e) - {"template_id"} == TEMPLATE_KWARGS_2_11 for es in table.values() for e in es)


def test_m_and_k_ranges_and_batchless_bmm_entries_are_skipped_with_one_warning_each(caplog):
    table = lut_from_rows([
        LUTRow("h100", "mm", "bfloat16",
               LUTEntry(m=MRange(min=1, max=512), n=8, k=8, configs=[cfg(16, 16, 16, 1, 1)])),
        LUTRow("h100", "mm", "bfloat16",
               LUTEntry(m=MRange(min=600, max=700), n=8, k=8, configs=[cfg(16, 16, 16, 1, 1)])),
        LUTRow("h100", "bmm", "bfloat16", BatchedLUTEntry(m=4, n=8, k=8, configs=[cfg(16, 16, 16, 1, 1)])),
        LUTRow("h100", "mm", "bfloat16", LUTEntry(m=560, n=8, k=8, configs=[cfg(16, 16, 16, 1, 1)])),
        # A k range (a weight gradient over a sequence length) is skipped too, not expanded.
        LUTRow("h100", "mm", "bfloat16", LUTEntry(m=560, n=8, k=SizeRange(min=9, max=8192), pin="aten")),
        LUTRow("h100", "mm", "bfloat16",
               LUTEntry(m=MRange(min=1, max=8), n=16, k=SizeRange(min=1, max=8), pin=cfg(16, 16, 16, 1, 1))),
    ])
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut.torch_table"):
        exported = to_inductor_table(table)
    assert len(exported) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5
    assert sum("a range of m cannot be exported" in m for m in messages) == 2
    assert sum("m=560 n=8 k=9..8192: torch's lookup_table keys are exact shapes, so a range of k cannot"
               in m for m in messages) == 1
    assert sum("a range of m and k cannot be exported" in m for m in messages) == 1
    assert sum("need the batch size" in m for m in messages) == 1


def test_several_devices_need_a_device_name():
    two = lut_from_rows([
        LUTRow(device, "mm", "bfloat16", LUTEntry(m=1, n=2, k=3, configs=[cfg(16, 16, 16, 1, 1)]))
        for device in ("h100", "a100")])
    with pytest.raises(LUTError, match="a100, h100; pass the device name"):
        to_inductor_table(two)
    only_a100 = to_inductor_table(two, "NVIDIA A100-SXM4-80GB")
    assert all(key.startswith("NVIDIA A100-SXM4-80GB+") for key in only_a100)


def _strip_notes(table: KernelLUT) -> KernelLUT:
    return lut_from_rows(row._replace(entry=row.entry.model_copy(update={"note": None}))
                               for row in table.entries())


def _with_layouts(table: KernelLUT, layouts: str) -> KernelLUT:
    return lut_from_rows(row._replace(entry=row.entry.model_copy(update={"layout": layout}))
                               for row, layout in zip(table.entries(), layouts))


def test_round_trip_through_the_torch_format():
    # A layout-less entry is exported under row-major keys, and read back as the "nn" entry it is
    # in torch's table; entries with a layout come back as they were.
    for original in (all_ops_lut(), _with_layouts(all_ops_lut(), ("tn", "nt", "nn", "tt", "nt"))):
        for device_name in (None, "NVIDIA H100 80GB HBM3"):
            exported = json.loads(json.dumps(to_inductor_table(original, device_name)))
            assert _strip_notes(from_inductor_table(exported, "h100")) == _with_layouts(
                original, [row.entry.layout or "nn" for row in original.entries()])


def test_layouts_export_under_the_strides_inductor_sees():
    torch = pytest.importorskip("torch")
    x, w = torch.empty(560, 3420, dtype=torch.bfloat16), torch.empty(1280, 3420, dtype=torch.bfloat16)
    gy = torch.empty(560, 1280, dtype=torch.bfloat16)

    def key(a, b) -> str:  # noqa: ANN001 -- str() of Inductor's (dtype, shape, stride) node tuples
        return str(tuple((t.dtype, list(t.shape), list(t.stride())) for t in (a, b))) + "+mm"

    rows = [LUTRow("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, layout="nt", pin="aten")),
            LUTRow("h100", "mm", "bfloat16", LUTEntry(m=1280, n=3420, k=560, layout="tn", pin="aten"))]
    table = to_inductor_table(lut_from_rows(rows))
    assert set(table) == {key(x, w.t()), key(gy.t(), x)}  # forward x @ W.t(), grad weight grad_y.t() @ x


def test_import_skips_what_a_lut_cannot_express(caplog):
    triton = {"template_id": "triton::mm", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
              "num_stages": 3, "num_warps": 4}
    table = {
        SEED_KEY: [triton, {"template_id": "aten::mm"}, {"template_id": "decompose_k", "k_split": 4},
                   {"template_id": "triton::mm", "BLOCK_M": 64}],
        "NVIDIA A100-SXM4-80GB+" + SEED_KEY: [triton],
        # A padded leading dimension: neither row-major nor an exact transposed view.
        "((torch.bfloat16, [560, 3420], [1, 576]), (torch.bfloat16, [3420, 1280], [1280, 1]))+mm": [triton],
        "((torch.int8, [8, 8], [8, 1]), (torch.int8, [8, 8], [8, 1]))+mm": [triton],
        "((torch.bfloat16, [8, 8], [8, 1]), (torch.bfloat16, [8, 8], [8, 1]))+int_mm": [triton],
    }
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut.torch_table"):
        lut = from_inductor_table(table, "h100")
    rows = list(lut.entries())
    assert len(rows) == 1
    assert (rows[0].entry.m, rows[0].entry.n, rows[0].entry.k) == (560, 1280, 3420)
    assert rows[0].entry.configs == [cfg(64, 64, 32, 3, 4)]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "decompose_k" in text and "BLOCK_N" in text and "not h100" in text
    assert "only row-major operands and transposed views" in text and "int8" in text and "int_mm" in text
    assert "aten::mm" not in text


def test_device_specific_configs_come_before_agnostic_ones():
    a = {"template_id": "triton::mm", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_stages": 3,
         "num_warps": 4}
    b = {**a, "BLOCK_M": 128}
    lut = from_inductor_table({SEED_KEY: [a], "NVIDIA H100 80GB HBM3+" + SEED_KEY: [b, a]}, "h100")
    assert [c.block_m for c in next(lut.entries()).entry.configs] == [128, 64]


@pytest.mark.gpu
def test_exported_seed_table_drives_inductor_lookup_table_choices():
    """On a GPU: torch's own LookupTableChoices, fed our export, benchmarks exactly the LUT config."""
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.lookup_table.choices import LookupTableChoices
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers
    from torch._inductor.virtualized import V

    seen: list[str] = []

    def saver(timings, name, *rest):
        seen.extend(getattr(choice, "description", "") for choice in timings)

    table = to_inductor_table(load_lut(SEED), torch.cuda.get_device_name())
    a = torch.randn(560, 3420, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3420, 1280, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    add_feedback_saver(saver)
    try:
        with V.set_choices_handler(LookupTableChoices()), inductor_config.patch(
                {"lookup_table.table": table, "max_autotune_gemm": True, "force_disable_caches": True}):
            out = torch.compile(torch.mm)(a, b)
    finally:
        clear_feedback_savers()
        torch._dynamo.reset()
    # Normwise: elementwise bounds trip on bf16 rounding of large sums (K = 3420).
    ref = a.float() @ b.float()
    assert float((out.float() - ref).norm() / ref.norm()) < 1e-2
    triton = [d for d in seen if "BLOCK_M" in d]
    assert len(triton) == 2, seen  # the seed entry's two measured-best configs, nothing else
    assert "BLOCK_K=64" in triton[0] and "BLOCK_M=64" in triton[0] and "num_stages=5" in triton[0]


def test_import_writes_a_table_validate_accepts_and_names_file_and_key(caplog):
    from kernel_select.device import get_device
    from kernel_select.lut import check_fits

    good = {"template_id": "triton::mm", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_stages": 3,
            "num_warps": 4}
    huge = {**good, "BLOCK_M": 1024, "BLOCK_N": 1024, "BLOCK_K": 1024}
    zero_m = SEED_KEY.replace("[560, 3420], [3420, 1]", "[0, 3420], [3420, 1]")
    big_m = SEED_KEY.replace("[560, 3420]", f"[{2**31}, 3420]")
    long_m = SEED_KEY.replace("[560, 3420]", f"[{'9' * 5000}, 3420]")
    table = {SEED_KEY: [huge, good], zero_m: [good], big_m: [good], long_m: [good],
             SEED_KEY.replace("560", "64"): [huge]}
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut.torch_table"):
        lut = from_inductor_table(table, "h100", source="table.json")
    (row,) = lut.entries()
    assert row.entry.configs == [cfg(64, 64, 32, 3, 4)] and check_fits(lut, get_device("h100")) == 1
    lines = [record.getMessage() for record in caplog.records]
    assert sum("leaving out 1024x1024x1024 s3 w4: cannot run on h100" in line for line in lines) == 2
    assert any(line.startswith("table.json: skipping") and "[0, 3420]" in line and "m: " in line
               for line in lines)
    assert any("2147483648" in line and "less than or equal to 2147483647" in line for line in lines)
    assert any("more than 19 digits" in line and len(line) < 400 for line in lines)
