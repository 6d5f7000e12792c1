"""Every bad input is "exit 2, one line", end to end through a fresh `python -m kernel_select.cli`.

Each row of the table below once traced back (exit 1), exited 0, or blamed the wrong thing.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_select.cli import main
from kernel_select.cli.main import DEBUG_ENV, one_line
from kernel_select.errors import LUTError
from tests.subprocess_env import package_env

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "h100.parquet"
#: The module, not the `main` function the package re-exports under the same name.
cli_main = importlib.import_module("kernel_select.cli.main")


def run_cli(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel_select.cli", *argv], cwd=REPO,
                          env=package_env(**env), capture_output=True, text=True, timeout=120)


def commands_must_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on in the test, a command that gets past its flags fails the test: what the test runs
    must be refused while argparse reads its flags, before the command's handler reads data, measures,
    trains or compiles anything."""
    build = cli_main.build_parser

    def parser_whose_commands_fail() -> argparse.ArgumentParser:
        parser = build()
        parse = parser.parse_args

        def parse_args(args: list[str] | None = None,
                       namespace: argparse.Namespace | None = None) -> argparse.Namespace:
            parsed = parse(args, namespace)
            parsed.handler = _started
            return parsed

        parser.parse_args = parse_args  # type: ignore[method-assign]
        return parser

    monkeypatch.setattr(cli_main, "build_parser", parser_whose_commands_fail)


def _started(args: argparse.Namespace) -> int:
    pytest.fail(f"{args.command!r} got past its flags and started: the bad input was not refused while "
                "its flags were parsed")


def assert_one_line_exit_2(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kernel-select") and ": error: " in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# Bad flags: each is refused while argparse reads it, before the command starts any work.
@pytest.mark.parametrize("argv, fragments", [
    (["shapes", "--out", "{dir}"], ["--out", "is a directory"]),
    (["lut", "schema", "--out", "{dir}"], ["--out", "is a directory"]),
    (["shapes", "--out", "{dir}/s.json", "--random", "-5"], ["--random", "from 0 to 100,000", "-5"]),
    (["shapes", "--out", "{dir}/s.json", "--max-flop", "0"], ["--max-flop", "> 0"]),
    (["space", "--m", "8", "--n", "8", "--k", "8", "--torch-version", "banana"],
     ["--torch-version", "banana"]),
    (["train", "--data", str(DATA), "--out", "{dir}/m", "--epochs", "-1"], ["--epochs", ">= 1"]),
    (["train", "--data", str(DATA), "--out", "{dir}/m", "--weight", "h100.parquet"],
     ["--weight", "expected PATTERN=FACTOR", "'h100.parquet'"]),
    (["train", "--data", str(DATA), "--out", "{dir}/m", "--weight", "h100.parquet=0"], ["--weight", "> 0"]),
    (["lut", "from-log", "-", "--gemm-topk", "0"], ["--gemm-topk", ">= 1"]),
    (["compare-models", "--max-seconds", "0"], ["--max-seconds", "> 0"]),
    (["topk", "--m", "8", "--n", "8", "--k", "8", "--nosuch"], ["unrecognized arguments: --nosuch"]),
])
def test_bad_input_exits_2_with_one_line(monkeypatch, capsys, tmp_path: Path, argv: list[str],
                                        fragments: list[str]):
    argv = [arg.format(dir=tmp_path) for arg in argv]
    line = assert_one_line_exit_2(run_cli(*argv), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was written
    # refused before any work: the same flags in-process never reach the command's handler
    commands_must_not_start(monkeypatch)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and capsys.readouterr().err == line + "\n"


def test_an_unknown_model_is_refused_before_the_data_is_read(tmp_path: Path):
    missing = tmp_path / "missing.parquet"
    line = assert_one_line_exit_2(run_cli("eval", "--data", str(missing), "--model", "nosuch"),
                                  "no model 'nosuch'", "available: ")
    assert str(missing) not in line  # reading the data first would have named the missing file


def test_a_huge_size_blames_the_argument_not_the_model():
    line = assert_one_line_exit_2(run_cli("topk", "--m", "99999999999999999999", "--n", "8", "--k", "8"),
                                  "--m", "99999999999999999999")
    assert "model" not in line


def test_an_os_error_is_one_line_and_the_traceback_needs_debug(tmp_path: Path):
    missing = tmp_path / "missing.json"
    argv = ["lut", "to-inductor", str(missing)]
    line = assert_one_line_exit_2(run_cli(*argv), str(missing))
    for debug in (run_cli(*argv, **{DEBUG_ENV: "1"}), run_cli("--debug", *argv)):
        assert debug.returncode == 2 and debug.stdout == ""
        assert debug.stderr.startswith("Traceback (most recent call last):")
        assert debug.stderr.splitlines()[-1] == line


@pytest.mark.parametrize("exc", [ValueError("bad\nvalue"), OSError(5, "Input/output error", "x.json"),
                                 LUTError("x.json: key 'a\x1b[2Jb' is unknown")])
def test_the_guard_turns_library_errors_into_one_line(monkeypatch, capsys, exc: Exception):
    def raising(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(cli_main.space, "run_space", raising)
    with pytest.raises(SystemExit) as info:
        main(["space", "--m", "8", "--n", "8", "--k", "8"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1
    assert err == f"kernel-select: error: {one_line(exc)}\n"


def test_one_line_joins_lines_and_escapes_control_characters():
    assert one_line(ValueError("first\n  second\n")) == "first; second"
    assert one_line(LUTError("key 'a\x1b[2Jb'\tc")) == "key 'a\\x1b[2Jb'\\tc"
    assert one_line(FileNotFoundError(2, "No such file or directory", "x.json")) == \
        "x.json: No such file or directory"
    assert one_line(ValueError()) == "ValueError"


def test_an_unexpected_bug_keeps_its_traceback(monkeypatch):
    def buggy(args: argparse.Namespace) -> int:
        raise KeyError("a bug, not bad input")

    monkeypatch.setattr(cli_main.space, "run_space", buggy)
    with pytest.raises(KeyError):
        main(["space", "--m", "8", "--n", "8", "--k", "8"])
