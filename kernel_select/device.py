"""Device specifications: the handful of hardware figures the config space and models need.

Figures are dense (no 2:4 sparsity) peak rates from NVIDIA's datasheets; each row cites
its source. `detect()` reads the running GPU through torch.cuda when one is present; on a
CPU-only machine pass the name explicitly (`--device h100`). A GPU that is not in KNOWN_DEVICES
(an L4, an RTX 4090, a B200) gets a spec read from the driver, its peak rates estimated
(`estimated_spec`), so `kernel-select calibrate` can train a model for it; once detected, its key
("l4") names it in this process too.

This is the one place that turns a device name into a key (`device_key`, `key_for_name`): a key
("h100"), an alias ("h100-sxm") or the name torch.cuda reports ("NVIDIA H100 80GB HBM3"). Matching
is by whole name tokens, never by substring, so "not-an-h100-at-all" is refused rather than read
as an H100.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from kernel_select.errors import DeviceError

TFLOPS = 1e12
TB_PER_S = 1e12


@dataclass(frozen=True)
class DeviceSpec:
    key: str  # short stable name used in file paths and LUTs: "h100", "a100", ...
    name: str  # marketing name as torch.cuda.get_device_name() reports it
    sm_count: int
    smem_per_block_optin: int  # bytes of shared memory one CTA may opt in to
    registers_per_sm: int  # 32-bit registers
    l2_bytes: int
    peak_flops_bf16: float  # dense tensor-core FLOP/s (fp16 is the same on these parts)
    peak_flops_tf32: float  # dense tensor-core FLOP/s with TF32 inputs
    peak_flops_fp32: float  # CUDA-core (non-tensor) FP32 FLOP/s, used when TF32 is off
    hbm_bytes_per_s: float
    capability: tuple[int, int]

    @property
    def identity(self) -> str:
        """The GPU in words, as a model card records it: name, architecture and SM count."""
        return f"{self.name} ({self.architecture}, {self.sm_count} SMs)"

    @property
    def architecture(self) -> str:
        """The SM architecture ("sm_90"): devices that share it run the same Triton kernels the
        same way, so a model trained on one ranks configs sensibly on another until retrained."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def peak_flops(self, dtype: str, allow_tf32: bool = False) -> float:
        if dtype in ("bfloat16", "float16"):
            return self.peak_flops_bf16
        return self.peak_flops_tf32 if allow_tf32 else self.peak_flops_fp32


KNOWN_DEVICES: dict[str, DeviceSpec] = {
    # H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (dense BF16 989.4 TF, TF32 494.7 TF,
    # FP32 66.9 TF, 3.35 TB/s HBM3) and the Hopper tuning guide (227 KB = 232448 B opt-in
    # shared memory per block, 64K registers per SM); 50 MB L2 as torch reports it.
    "h100": DeviceSpec(
        key="h100", name="NVIDIA H100 80GB HBM3", sm_count=132, smem_per_block_optin=232448,
        registers_per_sm=65536, l2_bytes=50 * 1024 * 1024, peak_flops_bf16=989.4 * TFLOPS,
        peak_flops_tf32=494.7 * TFLOPS, peak_flops_fp32=66.9 * TFLOPS,
        hbm_bytes_per_s=3.35 * TB_PER_S, capability=(9, 0),
    ),
    # H100 PCIe: same datasheet, PCIe column (114 SMs, BF16 756 TF, TF32 378 TF, FP32 51.2 TF,
    # 2.0 TB/s HBM2e); shared memory and L2 as on SXM.
    "h100-pcie": DeviceSpec(
        key="h100-pcie", name="NVIDIA H100 PCIe", sm_count=114, smem_per_block_optin=232448,
        registers_per_sm=65536, l2_bytes=50 * 1024 * 1024, peak_flops_bf16=756.0 * TFLOPS,
        peak_flops_tf32=378.0 * TFLOPS, peak_flops_fp32=51.2 * TFLOPS,
        hbm_bytes_per_s=2.0 * TB_PER_S, capability=(9, 0),
    ),
    # H200 SXM: NVIDIA H200 datasheet (same compute as H100 SXM, 4.8 TB/s HBM3e); L2 as
    # torch.cuda.get_device_properties reports it on an H200 (60 MB).
    "h200": DeviceSpec(
        key="h200", name="NVIDIA H200", sm_count=132, smem_per_block_optin=232448,
        registers_per_sm=65536, l2_bytes=60 * 1024 * 1024, peak_flops_bf16=989.4 * TFLOPS,
        peak_flops_tf32=494.7 * TFLOPS, peak_flops_fp32=66.9 * TFLOPS,
        hbm_bytes_per_s=4.8 * TB_PER_S, capability=(9, 0),
    ),
    # A100 SXM4 80GB: NVIDIA A100 datasheet (BF16 312 TF, TF32 156 TF, FP32 19.5 TF,
    # 2.039 TB/s) and the Ampere tuning guide (163 KB = 166912 B opt-in shared memory, 40 MB L2).
    "a100": DeviceSpec(
        key="a100", name="NVIDIA A100-SXM4-80GB", sm_count=108, smem_per_block_optin=166912,
        registers_per_sm=65536, l2_bytes=40 * 1024 * 1024, peak_flops_bf16=312.0 * TFLOPS,
        peak_flops_tf32=156.0 * TFLOPS, peak_flops_fp32=19.5 * TFLOPS,
        hbm_bytes_per_s=2.039 * TB_PER_S, capability=(8, 0),
    ),
}

_ALIASES = {"h100-sxm": "h100", "h100_sxm": "h100", "h100_pcie": "h100-pcie", "h200-sxm": "h200",
            "a100-sxm": "a100", "a100_sxm": "a100"}

# Names torch.cuda.get_device_name() reports: "NVIDIA" then the part as a whole word, then
# optional form-factor words ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB").
_MARKETING_NAME = re.compile(r"^nvidia\s+(?P<part>[ahb]\d{3})(?![0-9a-z])(?P<rest>.*)$")


#: Specs `detect()` built for GPUs outside KNOWN_DEVICES in this process, by key: `get_device("l4")`
#: finds the GPU calibrate measured without a datasheet row for it.
_DETECTED: dict[str, DeviceSpec] = {}


def detected_key(name: str) -> str | None:
    """The key of a GPU `detect()` found in this process outside KNOWN_DEVICES, named by its key or
    the exact name torch reports (case and `_` / `-` forgiven); None for any other name."""
    plain = name.strip().lower().replace("_", "-")
    for spec in _DETECTED.values():
        if plain in (spec.key, spec.name.lower().replace("_", "-")):
            return spec.key
    return None


def device_key(name: str | DeviceSpec) -> str:
    """The key of a known device ("h100") for a key, an alias or a torch.cuda device name.

    Raises DeviceError naming the known devices for anything else.
    """
    return get_device(name).key


def get_device(name: str | DeviceSpec) -> DeviceSpec:
    """Look a device up by key ("h100"), alias, or marketing name ("NVIDIA H100 80GB HBM3")."""
    if isinstance(name, DeviceSpec):
        return name
    if not isinstance(name, str):
        raise DeviceError(f"device: expected a device name, got {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in KNOWN_DEVICES:
        return KNOWN_DEVICES[key]
    by_name = _match_marketing_name(name)
    if by_name is not None:
        return by_name
    detected = _DETECTED.get(key) or _DETECTED.get(key_for_name(name))
    if detected is not None:
        return detected
    raise DeviceError(f"device: unknown device {name!r}; use one of {', '.join(KNOWN_DEVICES)}")


def key_for_name(name: str) -> str:
    """The key of a device name torch.cuda reports: a known device's key ("NVIDIA H100 PCIe" ->
    "h100-pcie"), else the name's words without the vendor and brand, lower case, joined by "-"
    ("NVIDIA L4" -> "l4", "NVIDIA GeForce RTX 4090" -> "rtx-4090"). Keys name model folders, so
    they hold only [a-z0-9-]."""
    known = _match_marketing_name(name)
    if known is not None:
        return known.key
    plain = name.strip().lower()
    if plain in KNOWN_DEVICES or plain in _ALIASES:
        return _ALIASES.get(plain, plain)
    words = [w for w in re.split(r"[^a-z0-9]+", plain) if w and w not in _BRAND_WORDS]
    return "-".join(words) or "gpu"


#: Words of a marketing name that name the vendor or the product line, not the part.
_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro"})


def same_architecture(spec: DeviceSpec) -> list[DeviceSpec]:
    """The other known devices with `spec`'s SM architecture, in KNOWN_DEVICES order."""
    return [other for other in KNOWN_DEVICES.values()
            if other.architecture == spec.architecture and other.key != spec.key]


def serves_anyway(trained_on: str, spec: DeviceSpec) -> bool:
    """Whether a model trained for the device `trained_on` serves `spec` without any calibration
    (model/folders.py): it is that GPU's own, or one of the same SM architecture."""
    return trained_on in {spec.key, *(other.key for other in same_architecture(spec))}


def _match_marketing_name(name: str) -> DeviceSpec | None:
    match = _MARKETING_NAME.match(name.strip().lower())
    if match is None:
        return None
    part, rest = match["part"], match["rest"]
    if part == "h100":
        return KNOWN_DEVICES["h100-pcie" if "pcie" in rest else "h100"]
    return KNOWN_DEVICES.get(part)


def detect(index: int = 0) -> DeviceSpec:
    """The spec of the CUDA device `index`, with SMs, smem, L2 and capability read from the driver.

    Known parts keep their datasheet peak rates; the counts the driver reports win where they
    differ (e.g. a partitioned part). Another GPU gets `estimated_spec` and is remembered under its
    key for `get_device`. Raises DeviceError without a CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("device: no CUDA device found; pass a device name such as --device h100")
    props = torch.cuda.get_device_properties(index)
    base = _match_marketing_name(props.name)
    if base is None:
        spec = estimated_spec(props)
        _DETECTED[spec.key] = spec
        return spec
    smem = getattr(props, "shared_memory_per_block_optin", base.smem_per_block_optin)
    l2 = getattr(props, "L2_cache_size", base.l2_bytes)
    return replace(base, name=props.name, sm_count=props.multi_processor_count,
                   smem_per_block_optin=int(smem), l2_bytes=int(l2),
                   capability=(props.major, props.minor))


#: Dense tensor-core FLOP per SM per clock with 16-bit inputs, by compute capability: the datasheet
#: rate over SMs x boost clock of one part of each (V100 and T4 1,024; A100 2,048; A10, A40, L4 and
#: L40S 1,024; H100 4,096; B200 about 8,000). TF32 runs at half of it on all of them.
_TENSOR_FLOP_PER_SM_CLOCK = {(7, 0): 1024, (7, 5): 1024, (8, 0): 2048, (9, 0): 4096, (10, 0): 8192,
                             (10, 3): 8192}
_TENSOR_FLOP_DEFAULT = 1024  # sm_86, sm_89, sm_12x and anything newer not listed
#: FP32 FLOP per SM per clock on the CUDA cores (2 per FMA lane): 64 lanes per SM on sm_70, sm_75 and
#: sm_80, 128 on sm_86 and later.
_FP32_FLOP_PER_SM_CLOCK = {(7, 0): 128, (7, 5): 128, (8, 0): 128}
_FP32_FLOP_DEFAULT = 256
#: What a driver that does not report the clocks gets: a typical boost clock and HBM-class bandwidth.
_FALLBACK_CLOCK_HZ = 1.5e9
_FALLBACK_BYTES_PER_S = 1.0 * TB_PER_S


def estimated_spec(props: object) -> DeviceSpec:
    """A DeviceSpec for a GPU outside KNOWN_DEVICES, from `torch.cuda.get_device_properties`: SMs,
    shared memory, registers, L2 and capability as the driver reports them; peak FLOP/s from the
    SM count, the clock and the per-clock rate of the architecture; memory bandwidth from the
    memory clock and bus width (double data rate).

    The peak rates are estimates. A model calibrated on this GPU uses them only as feature scales
    (its rooflines are in units of them, and it learns the real speeds from measurements), so an
    estimate that is off by a constant factor costs nothing; they must only stay the same from
    one process to the next, which they do because they come from the same driver figures.
    """
    name = str(getattr(props, "name"))
    major, minor = int(getattr(props, "major")), int(getattr(props, "minor"))
    sms = int(getattr(props, "multi_processor_count"))
    clock_hz = _reported(props, "clock_rate", 1e3) or _FALLBACK_CLOCK_HZ  # the driver reports kHz
    memory_hz = _reported(props, "memory_clock_rate", 1e3)
    bus_bytes = _reported(props, "memory_bus_width", 1 / 8)
    tensor = _TENSOR_FLOP_PER_SM_CLOCK.get((major, minor), _TENSOR_FLOP_DEFAULT)
    fp32 = _FP32_FLOP_PER_SM_CLOCK.get((major, minor), _FP32_FLOP_DEFAULT)
    return DeviceSpec(
        key=key_for_name(name), name=name, sm_count=sms,
        smem_per_block_optin=int(_reported(props, "shared_memory_per_block_optin", 1) or 48 * 1024),
        registers_per_sm=int(_reported(props, "regs_per_multiprocessor", 1) or 65536),
        l2_bytes=int(_reported(props, "L2_cache_size", 1) or 4 * 1024 * 1024),
        peak_flops_bf16=sms * clock_hz * tensor, peak_flops_tf32=sms * clock_hz * tensor / 2,
        peak_flops_fp32=sms * clock_hz * fp32,
        hbm_bytes_per_s=2 * memory_hz * bus_bytes if memory_hz and bus_bytes else _FALLBACK_BYTES_PER_S,
        capability=(major, minor),
    )


def _reported(props: object, field: str, scale: float) -> float:
    """A driver figure times `scale`, or 0 where this torch or driver does not report it (CUDA 13
    dropped the clock rates from cudaDeviceProp)."""
    value = getattr(props, field, 0)
    try:
        return max(float(value), 0.0) * scale
    except (TypeError, ValueError):
        return 0.0


def resolve(name: str | DeviceSpec | None) -> DeviceSpec:
    """An explicit name wins; otherwise detect the local GPU."""
    return detect() if name is None else get_device(name)
