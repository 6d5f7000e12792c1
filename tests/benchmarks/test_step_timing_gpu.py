"""The whole-model step timers on a real GPU: the device-time timer leaves out the host's launch time
of a launch-bound step and agrees with plain CUDA events on a GPU-bound one.

It compares timings, so it is a benchmark: `make bench` runs it on a GPU; `make test` skips it."""

from __future__ import annotations

import statistics

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_time_leaves_out_the_hosts_launch_time(benchmark):
    from kernel_select.offline.e2e.step_timing import CudaEventTimer, DeviceTimeTimer, interleaved_ms

    x = torch.zeros(256, device="cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def launch_bound() -> None:  # 50 tiny kernels: the host's launches take longer than the GPU's work
        for _ in range(50):
            x.add_(1.0)

    def gpu_bound() -> None:
        a @ a

    steps = {"launch_bound": launch_bound, "gpu_bound": gpu_bound}
    device_timer = DeviceTimeTimer()

    def both_timers() -> tuple[dict, dict]:
        return (interleaved_ms(steps, CudaEventTimer(), samples=10, min_sample_ms=2.0),
                interleaved_ms(steps, device_timer, samples=10, min_sample_ms=2.0))

    events, device = benchmark.pedantic(both_timers, rounds=1, iterations=1)
    event_ms = {name: statistics.median(times) for name, times in events.items()}
    device_ms = {name: statistics.median(times) for name, times in device.items()}
    benchmark.extra_info.update(event_ms=event_ms, device_ms=device_ms)
    assert device_timer.uncovered == 0
    assert device_ms["launch_bound"] < 0.8 * event_ms["launch_bound"]
    assert device_ms["gpu_bound"] == pytest.approx(event_ms["gpu_bound"], rel=0.05)
