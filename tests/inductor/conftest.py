"""Fixtures for the Inductor tests: knobs at known values, handlers uninstalled, a fake LUT file."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch._inductor.kernel_template_choice")

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select import runtime  # noqa: E402
from tests.inductor.kit import LUT_A, LUT_B  # noqa: E402
from tests.inductor_doubles import FakeLUT  # noqa: E402


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    # The cuBLAS gate is off here (the tests below that are about it turn it on): these tests pin
    # exact selections, which must not depend on whether the shipped gate skips a problem.
    with ks_config.patch(gemm_topk="DEFAULT", kernel_lut_path=None, gemm_model=None, gemm_device=None,
                         gemm_cublas_margin=None):
        yield
    while ks_inductor.uninstall():
        pass


@pytest.fixture
def lut_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LUT file with two entries for SEED; its text picks the entries the fake loader returns."""
    path = tmp_path / "lut.json"
    path.write_text("seed-v1")

    def read(p: str) -> FakeLUT:
        text = Path(p).read_text()
        if not text.startswith("seed"):
            from kernel_select.errors import LUTError

            raise LUTError(f"{p}: not a kernel lookup table")
        return FakeLUT({(560, 1280, 3420, "bfloat16"): [LUT_A, LUT_B]}, tag=text)

    monkeypatch.setattr(runtime, "_read_lut", read)
    return path


