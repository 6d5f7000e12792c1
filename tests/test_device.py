"""Device identity: a GPU outside KNOWN_DEVICES gets a spec from the driver, every device name has a
key, a model card records its GPU and refuses another of the same key, and shipped models can be
hidden for a device."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from tests.synthetic import untrained_mlp

from kernel_select import device as device_module
from kernel_select.device import detect, get_device, key_for_name
from kernel_select.errors import DeviceError, ModelCardMismatchError, NoTrainedModelError
from kernel_select.model import load_default
from kernel_select.model.card import GpuIdentity
from kernel_select.model.folders import model_folders
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.training.train import save_model
from kernel_select.resources import HIDE_SHIPPED_ENV, shipped_dir

#: What torch.cuda.get_device_properties reports on an NVIDIA L4 (datasheet: 58 SMs, 2,040 MHz boost,
#: 121 dense BF16 TFLOP/s, 300 GB/s of GDDR6 on a 192-bit bus, 48 MB L2, 99 KB opt-in shared memory).
L4_PROPS = types.SimpleNamespace(
    name="NVIDIA L4", major=8, minor=9, multi_processor_count=58, shared_memory_per_block_optin=101376,
    regs_per_multiprocessor=65536, L2_cache_size=48 * 1024 * 1024, clock_rate=2_040_000,
    memory_clock_rate=6_251_000, memory_bus_width=192)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """Make torch.cuda report one GPU with the properties the test sets (default: an L4)."""
    import torch

    monkeypatch.setattr(device_module, "_DETECTED", {})
    reported = {"props": L4_PROPS}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: reported["props"])
    return reported


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA RTX A6000", "rtx-a6000"), ("NVIDIA B200", "b200"), ("Tesla T4", "t4"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA A100-SXM4-40GB", "a100"),
    ("h200", "h200"), ("???", "gpu"),
])
def test_every_device_name_has_a_key_of_path_safe_characters(name: str, key: str):
    assert key_for_name(name) == key


def test_detect_gives_a_spec_for_a_gpu_outside_the_known_devices(fake_gpu):
    spec = detect()
    assert (spec.key, spec.name, spec.sm_count, spec.capability) == ("l4", "NVIDIA L4", 58, (8, 9))
    assert spec.architecture == "sm_89" and spec.l2_bytes == 48 * 1024 * 1024
    assert spec.smem_per_block_optin == 101376 and spec.registers_per_sm == 65536
    # the estimates land near the datasheet: 121 TFLOP/s BF16, 60 TF32, 30 FP32, 300 GB/s
    assert spec.peak_flops_bf16 == pytest.approx(121e12, rel=0.02)
    assert spec.peak_flops_tf32 == pytest.approx(60.5e12, rel=0.02)
    assert spec.peak_flops_fp32 == pytest.approx(30.3e12, rel=0.02)
    assert spec.hbm_bytes_per_s == pytest.approx(300e9, rel=0.01)
    # once detected, its key and its name find it
    assert get_device("l4") is spec and get_device("NVIDIA L4") is spec


def test_a_driver_without_clock_rates_still_gives_a_spec(fake_gpu):
    fake_gpu["props"] = types.SimpleNamespace(name="NVIDIA B200", major=10, minor=0,
                                              multi_processor_count=148)
    spec = detect()
    assert spec.key == "b200" and spec.capability == (10, 0) and spec.sm_count == 148
    assert spec.peak_flops_bf16 > 0 and spec.hbm_bytes_per_s > 0 and spec.smem_per_block_optin > 0


def test_an_unknown_device_that_was_not_detected_is_still_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(device_module, "_DETECTED", {})
    with pytest.raises(DeviceError, match="unknown device 'l4'"):
        get_device("l4")


def test_a_known_gpu_keeps_its_datasheet_rates_with_the_driver_counts(fake_gpu):
    fake_gpu["props"] = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
        shared_memory_per_block_optin=232448, L2_cache_size=50 * 1024 * 1024)
    assert detect() == get_device("h100")



def test_a_card_for_the_same_key_but_another_sm_count_is_refused_with_the_fix(fake_gpu, user: Path):
    l4 = detect()
    mine = untrained_mlp(device="l4")
    mine.card = mine.card.model_copy(update={"gpu": GpuIdentity(name="NVIDIA L4", capability=(8, 9),
                                                                sm_count=60)})
    save_model(mine, user / "l4")
    with pytest.raises(ModelCardMismatchError) as info:
        load_default(l4)
    message = str(info.value)
    assert str(user / "l4" / "mlp.json") in message
    assert "NVIDIA L4 (sm_89, 60 SMs)" in message and "NVIDIA L4 (sm_89, 58 SMs)" in message
    assert "kernel-select calibrate" in message


def test_a_card_recording_this_gpu_loads(fake_gpu, user: Path):
    l4 = detect()
    mine = untrained_mlp(device="l4")
    mine.card = mine.card.model_copy(update={"gpu": GpuIdentity.of(l4)})
    save_model(mine, user / "l4")
    loaded = load_default(l4)
    assert isinstance(loaded, MLPModel) and loaded.card.gpu == GpuIdentity.of(l4)


def test_the_shipped_cards_record_their_gpu():
    for key in ("h100", "h200"):
        card = MLPModel.load(shipped_dir("models") / key, key).card
        assert card.gpu == GpuIdentity.of(get_device(key))


def test_a_partitioned_h100_is_refused_the_shipped_model(fake_gpu, user: Path):
    fake_gpu["props"] = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=66,
        shared_memory_per_block_optin=232448, L2_cache_size=25 * 1024 * 1024)
    with pytest.raises(ModelCardMismatchError, match="132 SMs.*66 SMs"):
        load_default(detect())


def test_a_stand_in_of_another_key_is_not_refused_for_its_sm_count(user: Path):
    pcie = get_device("h100-pcie")  # 114 SMs, served by the H100 model (132 SMs) with one warning
    assert load_default(pcie).card.gpu.sm_count == 132


@pytest.mark.parametrize("hidden", ["h100", "all", " H100 , h200"])
def test_hiding_the_shipped_models_of_a_device(hidden: str, user: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(HIDE_SHIPPED_ENV, hidden)
    shipped = shipped_dir("models")
    folders = [folder for folder, _ in model_folders(get_device("h100"))]
    assert shipped / "h100" not in folders and user / "h100" in folders
    if hidden == "all" or "h200" in hidden:
        with pytest.raises(NoTrainedModelError):
            load_default("h100")
    else:  # the H200's shipped model stands in, as for any GPU of its architecture without its own
        assert load_default("h100").card.device == "h200"
    save_model(untrained_mlp(), user / "h100")  # the user's folder is never hidden
    assert load_default("h100").card.device == "h100"


def test_a_card_of_another_name_but_the_same_sm_count_loads_with_one_warning(fake_gpu, user: Path, caplog):
    import logging

    fake_gpu["props"] = types.SimpleNamespace(
        name="NVIDIA H100 NVL", major=9, minor=0, multi_processor_count=132,
        shared_memory_per_block_optin=232448, L2_cache_size=50 * 1024 * 1024)
    nvl = detect()
    assert nvl.key == "h100" and nvl.name == "NVIDIA H100 NVL"
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        first, again = load_default(nvl), load_default(nvl)
    assert first.card.gpu.name == "NVIDIA H100 80GB HBM3" and again.card == first.card
    named = [r.getMessage() for r in caplog.records if "this GPU is NVIDIA H100 NVL" in r.getMessage()]
    assert len(named) == 1 and "kernel-select calibrate" in named[0]
