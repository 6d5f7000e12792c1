"""One vocabulary on every command: each concept has one flag (kernel_select.cli.flags.VOCABULARY), old
spellings are hidden and warn, choices and dtypes are case-insensitive, and `--json` always prints to
stdout. Walks every subcommand's argparse parser, so a new command is checked as it is added."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kernel_select import options
from kernel_select.cli import flags
from kernel_select.cli.main import build_parser
from kernel_select.errors import OptionError

#: The dest each concept's flag stores into: a flag storing there must be the concept's one spelling.
CONCEPT_DEST = {
    "gemm_topk": "--gemm-topk", "network": "--network", "json": "--json", "json_out": "--json-out",
    "no_progress": "--no-progress", "max_seconds": "--max-seconds",
    "worker_max_seconds": "--worker-max-seconds",
    "torch_device": "--torch-device", "device": "--device", "model": "--model",
}
#: Spellings no command shows any more (they work, hidden and deprecated, where a command had them).
#: `--k` is allowed only as the K dimension of a problem, beside --m and --n.
FORBIDDEN = {"-k", "--topk", "--top", "--quiet", "--minutes", "--timeout", "--models", "--device-index",
             "--nogate-topk", "--buckets"}


def commands(parser: argparse.ArgumentParser | None = None,
             prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its name ("topk", "lut show")."""
    found = {}
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(commands(sub, f"{prefix}{name} "))
    return found


COMMANDS = commands()


def visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def test_the_walk_reaches_every_command():
    assert {"topk", "demo", "space", "bench", "eval", "gate-rules", "pretune", "record", "compare",
            "compare-models", "calibrate", "doctor", "lut show", "lut from-log"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_concept_has_one_spelling(name: str):
    parser = COMMANDS[name]
    flags_shown = {option for action in visible(parser) for option in action.option_strings}
    assert not flags_shown & FORBIDDEN, f"{name}: old spellings shown: {flags_shown & FORBIDDEN}"
    if "--k" in flags_shown:
        assert {"--m", "--n"} <= flags_shown, f"{name}: --k is the K dimension, beside --m and --n"
    for action in visible(parser):
        if action.dest in CONCEPT_DEST:
            assert action.option_strings == [CONCEPT_DEST[action.dest]], (name, action.option_strings)
        for option in action.option_strings:
            concept = next((dest for dest, flag in CONCEPT_DEST.items() if flag == option), None)
            assert concept is None or action.dest == concept, (name, option, action.dest)
    assert set(flags.VOCABULARY.values()) >= {CONCEPT_DEST[d] for d in CONCEPT_DEST}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_prints_to_stdout_and_a_file_is_json_out(name: str):
    for action in COMMANDS[name]._actions:
        if "--json" in action.option_strings:
            assert action.dest == "json" and action.type is None, name  # a flag, never a file name
            assert action.const is True or action.nargs == 0, name
        if "--json-out" in action.option_strings:
            assert action.type is not None and action.type.__name__ == "output_file", name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_hidden_flags_are_deprecated_spellings_of_a_shown_one(name: str):
    parser = COMMANDS[name]
    shown = {id(action) for action in visible(parser)}
    for action in parser._actions:
        if action.option_strings and action.help == argparse.SUPPRESS and action.option_strings != ["-h"]:
            assert isinstance(action, flags._Deprecated), (name, action.option_strings)
            assert id(action.new) in shown, (name, action.option_strings)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_choices_dtypes_and_devices_are_case_insensitive(name: str):
    for action in visible(COMMANDS[name]):
        if action.choices and all(isinstance(choice, str) for choice in action.choices):
            for choice in action.choices:
                assert action.type is not None, (name, action)
                assert action.type(choice.upper()) in action.choices, (name, action)
        if action.dest == "dtype":
            converted = action.type("BF16")
            assert converted in ("bfloat16", ("bfloat16",)), name
            assert action.type("Half") in ("float16", ("float16",)), name
        if action.dest == "device":
            assert action.type("H100") == "h100" and action.type("NVIDIA H200") == "h200", name


@pytest.mark.parametrize("value", ["4", " 16 ", "auto", "AUTO", "DEFAULT", "default", "SAME", "same", "0.5",
                                   "0", "-2", "four", "4_0", "\u0664", "1e3"])
def test_gemm_topk_takes_exactly_what_the_knob_takes(value: str, capsys):
    parser = build_parser()
    argv = ["topk", "--m", "8", "--n", "8", "--k", "8", "--gemm-topk", value]
    try:
        expected = options.parse_topk(value)
    except OptionError:
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert "--gemm-topk" in capsys.readouterr().err
    else:
        assert parser.parse_args(argv).gemm_topk == expected


def _parse(capsys, argv: list[str]) -> tuple[argparse.Namespace, str]:
    args = build_parser().parse_args(argv)
    return args, capsys.readouterr().err


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out.json"


OLD_AND_NEW = [
    (["topk", "--m", "8", "--n", "8", "--k", "8", "-k", "3"],
     ["topk", "--m", "8", "--n", "8", "--k", "8", "--gemm-topk", "3"], ["-k"]),
    (["demo", "-k", "2"], ["demo", "--gemm-topk", "2"], ["-k"]),
    (["pretune", "--model", "m:f", "--out", "{out}", "-k", "2", "--buckets", "3"],
     ["pretune", "--network", "m:f", "--out", "{out}", "--gemm-topk", "2", "--points", "3"],
     ["--model", "-k", "--buckets"]),
    (["record", "--model", "m:f", "--out", "{out}", "--top", "2"],
     ["record", "--network", "m:f", "--out", "{out}", "--gemm-topk", "2"], ["--model", "--top"]),
    (["lut", "from-log", "-", "--top", "2"], ["lut", "from-log", "-", "--gemm-topk", "2"], ["--top"]),
    (["compare", "--topk", "1,2", "--nogate-topk", "4", "--timeout", "5", "--device-index", "1"],
     ["compare", "--gemm-topk", "1,2", "--nogate-gemm-topk", "4", "--worker-max-seconds", "5",
      "--torch-device", "cuda:1"], ["--topk", "--nogate-topk", "--timeout", "--device-index"]),
    (["compare-models", "--models", "gpt2-small", "--model", "a:b", "--model", "c:d", "--device", "cpu",
      "--timeout", "9"],
     ["compare-models", "--networks", "gpt2-small", "--network", "a:b", "--network", "c:d", "--torch-device",
      "cpu", "--worker-max-seconds", "9"], ["--models", "--model", "--model", "--device", "--timeout"]),
    (["gate-rules", "--data", "x", "--k", "1,4", "--json", "{out}"],
     ["gate-rules", "--data", "x", "--gemm-topk", "1,4", "--json-out", "{out}"], ["--k", "--json FILE"]),
    (["eval", "--data", "x", "--json", "{out}"], ["eval", "--data", "x", "--json-out", "{out}"],
     ["--json FILE"]),
    (["fidelity", "--shapes", "x", "--json", "{out}"], ["fidelity", "--shapes", "x", "--json-out", "{out}"],
     ["--json FILE"]),
    (["train", "--data", "x", "--out", "{dir}", "--quiet"], ["train", "--data", "x", "--out", "{dir}",
                                                              "--no-progress"], ["--quiet"]),
    (["calibrate", "--minutes", "5", "--quiet"], ["calibrate", "--max-seconds", "300", "--no-progress"],
     ["--minutes", "--quiet"]),
]


@pytest.mark.parametrize("old, new, spellings", OLD_AND_NEW, ids=[case[0][0] for case in OLD_AND_NEW])
def test_an_old_spelling_still_works_with_a_warning(capsys, tmp_path: Path, old, new, spellings):
    def filled(argv: list[str]) -> list[str]:
        return [arg.format(out=tmp_path / "out.json", dir=tmp_path / "models") for arg in argv]

    old_args, warned = _parse(capsys, filled(old))
    new_args, quiet = _parse(capsys, filled(new))
    assert vars(old_args) == vars(new_args)
    assert quiet == ""
    for spelling in spellings:
        assert f"warning: {spelling} is deprecated and goes in 1.2; use " in warned, (spelling, warned)
    assert warned.count("\n") == len(spellings)


def test_json_without_a_file_prints_and_writes_nothing(capsys, tmp_path: Path):
    args, err = _parse(capsys, ["eval", "--data", "x", "--json"])
    assert args.json is True and args.json_out is None and err == ""
    args, err = _parse(capsys, ["eval", "--json", "--data", "x"])
    assert args.json is True and args.data == ["x"]


def test_shapes_json_prints_the_summary_and_a_dtype_alias_is_written_canonically(capsys, tmp_path: Path):
    import json

    from kernel_select.cli import main

    out = tmp_path / "shapes.json"
    argv = ["shapes", "--out", str(out), "--random", "2", "--no-models", "--dtype", "HALF", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["out"] == str(out) and summary["dtype"] == "float16"
    assert {entry["dtype"] for entry in json.loads(out.read_text())} == {"float16"}
