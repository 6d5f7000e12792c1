"""The GPU harness: plan, compile and time every config of a problem with an Inductor-equivalent
kernel; fidelity against real Inductor."""
