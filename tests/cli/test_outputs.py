"""Check before work: every command that writes refuses an output it could not write when its flags
are parsed, with one line naming the path, before it reads data, measures, trains or compiles.

The machines that run the suite run as root, where chmod does not stop a write; so these outputs are
ones root cannot write either: a directory where a file goes, a path under a regular file, a
hard-linked or read-only (mode 0444, refused by the atomic writer for everyone) target, and a file
system reported full or read-only."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernel_select import atomic_write
from kernel_select.cli import main, outputs
from tests.cli.test_errors import commands_must_not_start


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def parsing_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that gets past its flags fails the test: the output is refused when --out is parsed."""
    commands_must_not_start(monkeypatch)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first expensive step of the commands that check an output inside their handler fails the test:
    looking for the GPU (pretune, record, calibrate: measuring or compiling follows) and reading the
    training data (train)."""
    def gpu(command: str) -> None:
        pytest.fail(f"{command} looked for the GPU before it checked its output")

    def rows(*args: object) -> None:
        pytest.fail("train read its data before it checked its output")

    monkeypatch.setattr("kernel_select.cli.serving.require_gpu", gpu)
    monkeypatch.setattr("kernel_select.cli.calibrate.require_gpu", gpu)
    monkeypatch.setattr("kernel_select.offline.training.training_data.require_rows", rows)


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """tmp_path with `a-file` (a regular file), `a-dir` (a folder), `linked` (two hard links) and
    `locked` (mode 0444)."""
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "linked").write_text("x")
    os.link(tmp_path / "linked", tmp_path / "linked-too")
    (tmp_path / "locked").write_text("x")
    (tmp_path / "locked").chmod(0o444)
    (tmp_path / "shapes.json").write_text('[{"m": 64, "n": 64, "k": 64, "dtype": "bfloat16"}]')
    return tmp_path


#: (argv, the refused path): every command that writes, each with an output it cannot write.
REFUSED = [
    (["bench", "--shapes", "{d}/shapes.json", "--out", "{d}/locked"], "{d}/locked"),
    (["bench", "--shapes", "{d}/shapes.json", "--out", "{d}/a-dir"], "{d}/a-dir"),
    (["bench", "--shapes", "{d}/shapes.json", "--out", "{d}/linked"], "{d}/linked"),
    (["bench", "--shapes", "{d}/shapes.json", "--out", "{d}/a-file/sub/x.parquet"],
     "{d}/a-file/sub/x.parquet"),
    (["shapes", "--out", "{d}/linked"], "{d}/linked"),
    (["shapes", "--out", "{d}/a-file/s.json"], "{d}/a-file/s.json"),
    (["shapes", "--active", "--pool", "{d}/shapes.json", "--rows", "9", "--out", "{d}/s.json", "--json-out",
      "{d}/a-dir"], "{d}/a-dir"),
    (["train", "--data", "{d}/x.parquet", "--out", "{d}/a-file"], "{d}/a-file"),
    (["train-gate", "--data", "{d}/x.parquet", "--out", "{d}/a-file/m"], "{d}/a-file/m"),
    (["eval", "--data", "{d}/x.parquet", "--json-out", "{d}/a-dir"], "{d}/a-dir"),
    (["eval", "--data", "{d}/x.parquet", "--pinned-rows", "{d}/locked"], "{d}/locked"),
    (["gate-rules", "--data", "{d}/x.parquet", "--json-out", "{d}/linked"], "{d}/linked"),
    (["fidelity", "--shapes", "{d}/shapes.json", "--json-out", "{d}/a-file/f.json"], "{d}/a-file/f.json"),
    (["pretune", "--shapes", "{d}/shapes.json", "--out", "{d}/locked"], "{d}/locked"),
    (["record", "--network", "m:f", "--out", "{d}/a-dir"], "{d}/a-dir"),
    (["lut", "from-log", "-", "--out", "{d}/a-dir"], "{d}/a-dir"),
    (["lut", "from-inductor", "{d}/shapes.json", "--device", "h100", "--out", "{d}/linked"], "{d}/linked"),
    (["lut", "to-inductor", "{d}/shapes.json", "--out", "{d}/locked"], "{d}/locked"),
    (["lut", "schema", "--out", "{d}/a-file/schema.json"], "{d}/a-file/schema.json"),
    (["calibrate", "--out", "{d}/a-file"], "{d}/a-file"),
    (["compare", "--out", "{d}/a-file"], "{d}/a-file"),
    (["compare-models", "--out", "{d}/a-file/results"], "{d}/a-file/results"),
]


@pytest.mark.parametrize("argv, refused", REFUSED, ids=[" ".join(a[:2]) for a, _ in REFUSED])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(capsys, place: Path, parsing_only, argv,
                                                                      refused):
    before = sorted(p.name for p in place.iterdir())
    code, out, err = run(capsys, *(arg.format(d=place) for arg in argv))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{refused.format(d=place)}: " in err and ": error: argument --" in err
    # refused before the GPU or the data is looked at
    assert "needs a CUDA GPU" not in err and "no rows" not in err
    assert sorted(p.name for p in place.iterdir()) == before


def test_pretune_checks_its_progress_file_before_the_gpu(capsys, place: Path, no_work):
    (place / "p.json.progress.json").mkdir()
    shapes, out = str(place / "shapes.json"), str(place / "p.json")
    code, _, err = run(capsys, "pretune", "--shapes", shapes, "--out", out)
    assert code == 2 and f"{place / 'p.json.progress.json'}: is a directory" in err and "CUDA" not in err


def test_train_checks_the_files_it_replaces_before_training(capsys, place: Path, no_work):
    (place / "m").mkdir()
    (place / "m" / "mlp.pt").mkdir()  # a folder where the checkpoint goes: no one can replace it
    code, _, err = run(capsys, "train", "--data", str(place / "missing.parquet"), "--out", str(place / "m"))
    assert code == 2 and f"{place / 'm' / 'mlp.pt'}: is a directory" in err and "missing.parquet" not in err


@pytest.mark.parametrize("flag, reason", [(os.ST_RDONLY, "read-only file system"), (0, "KiB free")])
def test_a_read_only_or_full_file_system_is_refused(capsys, monkeypatch, tmp_path: Path, parsing_only,
                                                    flag: int, reason: str):
    real = os.statvfs

    def reported(path):  # noqa: ANN001, ANN202
        fs = real(path)
        return SimpleNamespace(f_flag=flag, f_bavail=fs.f_bavail if flag else 10, f_frsize=fs.f_frsize)

    monkeypatch.setattr(atomic_write.os, "statvfs", reported)
    code, _, err = run(capsys, "lut", "schema", "--out", str(tmp_path / "new" / "schema.json"))
    assert code == 2 and f"{tmp_path / 'new' / 'schema.json'}: cannot be written" in err and reason in err
    assert not (tmp_path / "new").exists()


def test_a_writable_output_passes_and_a_missing_folder_is_created(capsys, tmp_path: Path):
    target = tmp_path / "new" / "deeper" / "schema.json"
    atomic_write.check_writable(target)
    outputs.check_output_dir(tmp_path / "models", ("mlp.pt",))
    code, out, err = run(capsys, "lut", "schema", "--out", str(target))
    assert code == 0 and target.read_text().startswith("{") and err == ""


def test_a_path_with_control_characters_is_shown_escaped(capsys, tmp_path: Path, parsing_only):
    odd = tmp_path / "a\x1b[2Jb"
    odd.mkdir()
    code, _, err = run(capsys, "lut", "schema", "--out", str(odd))
    assert code == 2 and "\x1b" not in err and "a\\x1b[2Jb" in err


def test_record_reads_the_table_it_extends_before_the_compile(capsys, tmp_path: Path, no_work):
    broken = tmp_path / "serving.json"
    broken.write_text('{"schema_version": 4, "devices": {"h100": {"mm": {"bfloat16": [{"m": 0}]}}}}')
    code, _, err = run(capsys, "record", "--network", "m:f", "--out", str(broken))
    assert code == 2 and f"{broken}: " in err and "CUDA" not in err


@pytest.mark.parametrize("command", ["compare", "compare-models"])
def test_an_unknown_torch_device_is_refused_before_any_worker(capsys, parsing_only, command: str):
    code, _, err = run(capsys, command, "--torch-device", "tpu")
    assert code == 2 and "--torch-device: expected cuda, cuda:N or cpu, got 'tpu'" in err


def test_calibrate_checks_the_user_model_directory_it_writes_into(capsys, monkeypatch, place: Path, no_work):
    monkeypatch.setenv("KERNEL_SELECT_MODELS_DIR", str(place / "a-file"))
    code, _, err = run(capsys, "calibrate")
    assert code == 2 and f"{place / 'a-file'}: is a regular file, not a folder" in err and "CUDA" not in err
