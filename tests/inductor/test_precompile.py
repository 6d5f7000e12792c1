"""precompile_in_process: Triton choices precompiled in the compiling process, the gate scoped to
make_precompile_fn, the knob's routes, and a torch without the expected shape."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor import select_algorithm  # noqa: E402
from torch._inductor.async_compile import AsyncCompile  # noqa: E402
from torch._inductor.autotune_process import TritonGPUBenchmarkRequest  # noqa: E402
from torch._inductor.select_algorithm import AlgorithmSelectorCache, TritonTemplateCaller  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select.errors import OptionError  # noqa: E402
from kernel_select.inductor import precompile  # noqa: E402
from kernel_select.inductor.settings import resolve_settings, validated_overrides  # noqa: E402
from tests.subprocess_env import package_env  # noqa: E402


class FakeTritonChoice(TritonTemplateCaller):
    """Passes make_precompile_fn's isinstance checks for a Triton CUDA choice; records where it
    was precompiled and what use_process_pool() answered in that thread."""

    def __init__(self, name: str, module_path: Path, journal: dict[str, Any]) -> None:  # no super(): no IR
        self.name, self.description, self.journal = name, "fake", journal
        self.bmreq = object.__new__(TritonGPUBenchmarkRequest)
        self.bmreq.module_path, self.bmreq.kernel_name = str(module_path), f"triton_{name}"

    def kernel_hash_key(self) -> str:
        return self.name

    def precompile(self) -> None:
        self.journal["in_process"].append(self.name)
        self.journal["pool_seen_by_worker_thread"].append(AsyncCompile.use_process_pool())


@pytest.fixture
def pool_ready(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Inductor's state after the first compile: the worker pool is up. AsyncCompile.triton
    records instead of compiling."""
    journal: dict[str, Any] = collections.defaultdict(list)
    monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(lambda cls: True))

    def triton(self: AsyncCompile, kernel_name: str, source_code: str) -> Any:
        journal["in_pool"].append(kernel_name.removeprefix("triton_"))
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_result((None, 0))
        return types.SimpleNamespace(future=done)

    monkeypatch.setattr(AsyncCompile, "triton", triton)
    # torch skips precompiling on Python 3.11.0-3.11.8 (cpython issue 106905), which this CPU
    # machine runs; the GPU machine's 3.12 does not, so pretend to be it.
    version = collections.namedtuple("version_info", "major minor micro")(3, 12, 0)
    fake_sys = types.SimpleNamespace(**{**vars(sys), "version_info": version})
    monkeypatch.setattr(select_algorithm, "sys", fake_sys)
    return journal


@pytest.fixture(autouse=True)
def knob_off():
    # (tests/conftest.py's fresh_runtime forgets the warnings already shown)
    with ks_config.patch(gemm_precompile_in_process=False):
        yield


def precompile_two_choices(journal: dict[str, Any], tmp_path: Path) -> None:
    """Torch's own make_precompile_fn (wrapped or not) on two Triton choices, waited on."""
    source = tmp_path / "kernel.py"
    source.write_text("# kernel source\n")
    choices = [FakeTritonChoice(name, source, journal) for name in ("a", "b")]
    selector = AlgorithmSelectorCache()
    selector.lookup = lambda *args, **kwargs: {}  # no cached timings: precompile everything
    wait = selector.make_precompile_fn(choices, "mm", "inputs-key")
    wait()


def test_without_the_knob_choices_go_to_the_pool(pool_ready: dict[str, Any], tmp_path: Path):
    ks_inductor.install()
    precompile_two_choices(pool_ready, tmp_path)
    assert pool_ready["in_pool"] == ["a", "b"] and not pool_ready["in_process"]


def test_with_the_knob_choices_are_precompiled_in_process(pool_ready: dict[str, Any], tmp_path: Path):
    pool_check = AsyncCompile.__dict__["use_process_pool"]
    ks_inductor.install(gemm_precompile_in_process=True)
    precompile_two_choices(pool_ready, tmp_path)
    assert sorted(pool_ready["in_process"]) == ["a", "b"] and not pool_ready["in_pool"]
    # The worker threads (and everything after the call) see torch's own answer.
    assert pool_ready["pool_seen_by_worker_thread"] == [True, True]
    assert AsyncCompile.__dict__["use_process_pool"] is pool_check
    assert AsyncCompile.use_process_pool() is True


@pytest.mark.parametrize(("install_arg", "knob", "option", "in_process"), [
    (None, True, None, True),     # the knob (environment or kernel_select.knobs)
    (False, True, None, False),   # install() over the knob
    (True, False, False, False),  # the torch option over install()
    (None, False, True, True),
])
def test_every_call_resolves_option_then_install_then_knob(pool_ready: dict[str, Any], tmp_path: Path,
                                                          install_arg: bool | None, knob: bool,
                                                          option: bool | None, in_process: bool):
    assert ks_inductor.register_options()
    ks_inductor.install(gemm_precompile_in_process=install_arg)
    overrides = validated_overrides({"gemm_precompile_in_process": install_arg}, where="install")
    with ks_config.patch(gemm_precompile_in_process=knob), \
            inductor_config.patch(gemm_precompile_in_process=option):
        assert resolve_settings(overrides).gemm_precompile_in_process is in_process
        precompile_two_choices(pool_ready, tmp_path)
    assert bool(pool_ready["in_process"]) is in_process and bool(pool_ready["in_pool"]) is not in_process


def test_another_thread_without_an_install_keeps_the_pool(pool_ready: dict[str, Any], tmp_path: Path):
    ks_inductor.install(gemm_precompile_in_process=True)  # in this thread only, like the handler
    worker = threading.Thread(target=precompile_two_choices, args=(pool_ready, tmp_path))
    worker.start()
    worker.join()
    assert pool_ready["in_pool"] == ["a", "b"] and not pool_ready["in_process"]


def test_gate_answers_false_in_its_thread_only(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(lambda cls: True))
    pool_check = AsyncCompile.__dict__["use_process_pool"]
    seen: dict[str, bool] = {}
    with precompile.in_process_precompile():
        seen["inside"] = AsyncCompile().use_process_pool()
        other = threading.Thread(
            target=lambda: seen.__setitem__("other thread", AsyncCompile.use_process_pool()))
        other.start()
        other.join()
        with precompile.in_process_precompile():
            seen["nested"] = AsyncCompile.use_process_pool()
        seen["after nested"] = AsyncCompile.use_process_pool()
    assert seen == {"inside": False, "other thread": True, "nested": False, "after nested": False}
    assert AsyncCompile.__dict__["use_process_pool"] is pool_check


def test_install_wraps_make_precompile_fn_and_uninstall_restores_it():
    make_fn = AlgorithmSelectorCache.__dict__["make_precompile_fn"]
    pool_check = AsyncCompile.__dict__["use_process_pool"]
    ks_inductor.install(gemm_precompile_in_process=True)
    ks_inductor.install()
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is not make_fn
    assert AsyncCompile.__dict__["use_process_pool"] is pool_check  # patched only during the call
    assert ks_inductor.uninstall()
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is not make_fn  # one install left
    assert ks_inductor.uninstall()
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is make_fn
    assert AsyncCompile.__dict__["use_process_pool"] is pool_check


def test_knob_is_parsed_when_settings_are_resolved_and_install_checks_its_argument():
    with ks_config.patch(gemm_precompile_in_process="ON"):
        assert resolve_settings().gemm_precompile_in_process is True
    with ks_config.patch(gemm_precompile_in_process="maybe"):
        with pytest.raises(OptionError, match=r"kernel_select.knobs.gemm_precompile_in_process"):
            resolve_settings()
    with pytest.raises(OptionError, match=r"install\(gemm_precompile_in_process"):
        ks_inductor.install(gemm_precompile_in_process="sometimes")
    assert not ks_inductor.uninstall()  # the bad argument installed nothing


def test_a_bad_knob_value_keeps_the_pool_instead_of_breaking_the_compile(pool_ready: dict[str, Any],
                                                                        tmp_path: Path):
    ks_inductor.install()
    with ks_config.patch(gemm_precompile_in_process="maybe"):
        precompile_two_choices(pool_ready, tmp_path)
    assert pool_ready["in_pool"] == ["a", "b"] and not pool_ready["in_process"]


def test_environment_variable_is_read_and_validated():
    code = "import kernel_select.knobs as c; print(c.gemm_precompile_in_process)"
    env = package_env(TORCHINDUCTOR_GEMM_PRECOMPILE_IN_PROCESS="yes")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]
    env["TORCHINDUCTOR_GEMM_PRECOMPILE_IN_PROCESS"] = "2"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "TORCHINDUCTOR_GEMM_PRECOMPILE_IN_PROCESS" in bad.stderr


def _precompile_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "precompile_in_process" in r.getMessage()]


def test_torch_without_use_process_pool_warns_once_and_patches_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture):
    monkeypatch.delattr(AsyncCompile, "use_process_pool")
    make_fn = AlgorithmSelectorCache.__dict__["make_precompile_fn"]
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        ks_inductor.install()  # knob off: nothing asked for, nothing said
        assert not _precompile_warnings(caplog)
        handler = ks_inductor.install(gemm_precompile_in_process=True)
        ks_inductor.install(gemm_precompile_in_process=True)
        with precompile.in_process_precompile():  # the gate alone does not raise either
            pass
    assert isinstance(handler, ks_inductor.KernelSelectChoices)
    warnings = _precompile_warnings(caplog)
    assert len(warnings) == 1 and "use_process_pool" in warnings[0]
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is make_fn
    while ks_inductor.uninstall():
        pass
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is make_fn


def test_make_precompile_fn_that_no_longer_consults_the_pool_is_left_alone(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    def make_precompile_fn(self: Any, choices: Any, *args: Any, **kwargs: Any) -> Any:
        return lambda: {}

    monkeypatch.setattr(AlgorithmSelectorCache, "make_precompile_fn", make_precompile_fn)
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        ks_inductor.install(gemm_precompile_in_process=True)
    assert AlgorithmSelectorCache.__dict__["make_precompile_fn"] is make_precompile_fn
    warnings = _precompile_warnings(caplog)
    assert len(warnings) == 1 and "no longer consults use_process_pool" in warnings[0]
