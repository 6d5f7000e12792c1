"""Serving without autotuning: pretune a program into a pinned LUT, and the serving measurement."""
