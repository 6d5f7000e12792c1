"""The `kernel-select` command line."""

from kernel_select.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
