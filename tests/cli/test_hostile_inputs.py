"""Hostile and careless inputs on the command line: each is refused before the command's work, without
reading what it should not (a FIFO, /dev/zero, a file over its cap), with exit 2 and one line that names
the path (and the cap), and every line that echoes a path prints it escaped.

Each row here once grew memory without bound, hung, traced back, exited 0 or forged a line.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_select.cli import main
from kernel_select.lut import load_lut
from kernel_select.offline.data import dataset, problem_ids
from tests.cli.test_errors import commands_must_not_start, run_cli
from tests.lut.test_hardening import no_waiting_on_fifos
from tests.offline.test_bench_plan import _rows

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "luts" / "h100_seed.json"
DATA = ROOT / "data" / "h100.parquet"
unix_only = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(),
                               reason="needs FIFOs and /dev/zero (POSIX)")
PROCESS_IO = Path("/proc/self/io")
reads_counted = pytest.mark.skipif(not PROCESS_IO.exists(), reason="needs /proc/self/io (Linux)")
#: The most a refusal may read: its input where that is what is refused (the deep JSON, 200 kB) and the
#: modules its command imports (12 MB at most, measured). Every hostile file here is refused over a cap
#: of 64 MiB or more, so reading one up to its cap fails the test.
MOST_READ = 32 << 20


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process run."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    return code, out, err


def bytes_read() -> int:
    """Bytes this process has read so far: the kernel's count of read() and pread() on any file, pipe or
    device (rchar), so a read by pyarrow's C++ code counts as much as one by Python's."""
    fields = dict(line.split(": ") for line in PROCESS_IO.read_text().splitlines())
    return int(fields["rchar"])


def one_error_line(err: str, *fragments: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kernel-select") and ": error: " in lines[0], err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A folder of bad inputs: a FIFO, sparse files over each cap, deep JSON, an empty dataset,
    a dataset with m = 2^62 written without the checks, an existing file."""
    os.mkfifo(tmp_path / "fifo")
    for name, size in (("huge.log", (256 << 20) + 1), ("huge.json", (64 << 20) + 1)):
        with open(tmp_path / name, "wb") as handle:
            handle.truncate(size)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    rows = _rows(problem_ids.problem_id(16, 16, 16, "bfloat16"), [1.0])
    dataset.write(rows.iloc[:0], tmp_path / "empty.parquet")
    rows = rows.assign(m=2**62)
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), tmp_path / "m62.parquet")
    (tmp_path / "a-file").write_text("{}")
    return tmp_path


#: Hostile input files, each refused by the first step that reads it, from what the path is (its type or
#: size) or from the little of it that shows the fault.
HOSTILE_FILES = [
    (["lut", "from-log", "/dev/zero"], ["/dev/zero: is a character device, not a regular file"]),
    (["lut", "from-log", "{d}/huge.log"],
     ["{d}/huge.log: 268,435,457 bytes or more is over the AUTOTUNE log size limit of 268,435,456 bytes "
      "(kernel_select.lut.bounded_read.MAX_LOG_BYTES)"]),
    (["lut", "from-inductor", "/dev/zero", "--device", "h100"], ["/dev/zero: is a character device"]),
    (["lut", "from-inductor", "{d}/fifo", "--device", "h100"], ["{d}/fifo: is a FIFO (named pipe)"]),
    (["lut", "from-inductor", "{d}/deep.json", "--device", "h100"],
     ["{d}/deep.json: invalid JSON: nested more than 64 levels deep"]),
    (["lut", "from-inductor", "{d}/huge.json", "--device", "h100"], ["over the lookup_table size limit"]),
    (["fidelity", "--shapes", "/dev/zero"], ["/dev/zero: is a character device", "shapes JSON file"]),
    (["bench", "--shapes", "/dev/zero", "--out", "{d}/x.parquet"], ["/dev/zero: is a character device"]),
    (["bench", "--shapes", "{d}/fifo", "--out", "{d}/x.parquet"], ["{d}/fifo: is a FIFO"]),
    (["bench", "--shapes", "{d}/huge.json", "--out", "{d}/x.parquet"],
     ["over the shapes size limit of 67,108,864 bytes (kernel_select.offline.json_files.MAX_SHAPES_BYTES)"]),
    (["bench", "--shapes", "{d}/deep.json", "--out", "{d}/x.parquet"], ["nested more than 64 levels deep"]),
    (["pretune", "--shapes", "/dev/zero", "--out", "{d}/p.json"], ["/dev/zero: is a character device"]),
    (["compare", "--shapes", "{d}/fifo", "--out", "{d}/c"], ["{d}/fifo: is a FIFO"]),
    (["compare", "--lut", "{d}/fifo", "--out", "{d}/c"], ["{d}/fifo: is a FIFO"]),
    (["train", "--data", "{d}/empty.parquet", "--out", "{d}/m"],
     ["{d}/empty.parquet: no rows; training needs"]),
    (["train-gate", "--data", "{d}/empty.parquet", "--out", "{d}/m"], ["{d}/empty.parquet: no rows"]),
    (["eval", "--data", "{d}/empty.parquet"], ["{d}/empty.parquet: no rows; eval needs"]),
    (["gate-rules", "--data", "{d}/empty.parquet"], ["{d}/empty.parquet: no rows"]),
    (["eval", "--data", "{d}/fifo"], ["{d}/fifo: is a FIFO (named pipe), not a regular file"]),
    (["audit", "{d}"], ["{d}: is a directory, not a regular file"]),
    (["audit", "{d}/m62.parquet"], ["{d}/m62.parquet: row 0 ", "column 'm' is 4611686018427387904"]),
    (["eval", "--data", "{d}/m62.parquet"], ["column 'm' is 4611686018427387904; expected a size from 1"]),
]

#: Hostile flag values, each refused while argparse reads it.
HOSTILE_FLAGS = [
    (["shapes", "--out", "{d}/s.json", "--random", "1000000000000"], ["--random", "from 0 to 100,000"]),
    (["shapes", "--out", "{d}/s.json", "--coverage", "1000000000"], ["--coverage", "from 1 to 100,000"]),
    (["shapes", "--out", "{d}/s.json", "--coverage", "0"], ["--coverage", "from 1 to 100,000", "'0'"]),
    (["shapes", "--out", "{d}/fifo"], ["{d}/fifo: is a FIFO (named pipe), not a regular file"]),
    (["space", "--m", "64_0", "--n", "8", "--k", "8"], ["--m: expected an integer, got '64_0'"]),
    (["space", "--m", "\u0666\u0664", "--n", "8", "--k", "8"], ["--m: expected an integer"]),
    (["space", "--m", "9" * 5000, "--n", "8", "--k", "8"], ["--m", "'999999999"]),
    (["topk", "--m", "8", "--n", "8", "--k", "8", "--gemm-topk", "4_0"],
     ["--gemm-topk: expected a count >= 1", "'4_0'"]),
    (["bench", "--shapes", "x.json", "--out", "{d}/x.parquet", "--max-seconds", "1_0"], ["--max-seconds"]),
    (["train", "--data", str(DATA), "--out", "{d}/a-file"],
     ["--out", "{d}/a-file: is a regular file, not a folder"]),
]


def refused_with_one_line(capsys: pytest.CaptureFixture[str], hostile: Path, argv: list[str],
                          fragments: list[str]) -> None:
    before = sorted(p.name for p in hostile.iterdir())
    code, out, err = run_main(capsys, *(arg.format(d=hostile) for arg in argv))
    assert code == 2 and out == ""
    one_error_line(err, *(fragment.format(d=hostile) for fragment in fragments))
    assert sorted(p.name for p in hostile.iterdir()) == before  # nothing was written


@unix_only
@reads_counted
@pytest.mark.parametrize("argv, fragments", HOSTILE_FILES)
def test_a_hostile_file_is_refused_unread_with_one_line(capsys, hostile: Path, argv: list[str],
                                                        fragments: list[str]) -> None:
    # refused before the work, which starts only once the input is read: none of it is read (a FIFO is
    # not waited on, /dev/zero and the files over their caps not read up to the cap)
    with no_waiting_on_fifos():
        start = bytes_read()
        refused_with_one_line(capsys, hostile, argv, fragments)
        read = bytes_read() - start
    assert read < MOST_READ, f"read {read:,} bytes"


@unix_only
@pytest.mark.parametrize("argv, fragments", HOSTILE_FLAGS)
def test_a_hostile_flag_is_refused_before_the_command_starts(capsys, monkeypatch, hostile: Path,
                                                             argv: list[str], fragments: list[str]) -> None:
    commands_must_not_start(monkeypatch)
    refused_with_one_line(capsys, hostile, argv, fragments)


def test_a_value_echoed_in_an_error_is_cut(capsys, tmp_path: Path) -> None:
    lut = tmp_path / "v.json"
    lut.write_text('{"schema_version": ' + "9" * 4300 + ', "devices": {}}')
    code, out, err = run_main(capsys, "lut", "validate", str(lut))
    line = one_error_line(err, f"{lut}: schema_version: 99999", "... was written by a newer kernel_select")
    assert code == 2 and out == "" and len(line) < len(str(lut)) + 200


def test_a_stdin_log_over_the_cap_is_refused(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_select.lut import bounded_read

    small = dataclasses.replace(bounded_read.AUTOTUNE_LOG_FILE, limit=1000)
    monkeypatch.setattr(bounded_read, "AUTOTUNE_LOG_FILE", small)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x" * 1001)))
    code, out, err = run_main(capsys, "lut", "from-log", "-")
    assert code == 2 and out == ""
    one_error_line(err, "<stdin>: 1,001 bytes or more is over the AUTOTUNE log size limit of 1,000 bytes")


# -- lines that echo a path ---------------------------------------------------------------------

FORGED = "x\nfake: ok, 999 entries.json"
COLORED = "\x1b[31mred.json"


@pytest.mark.parametrize("name, shown", [(FORGED, "x\\nfake: ok, 999 entries.json"),
                                         (COLORED, "\\x1b[31mred.json")])
def test_success_lines_print_paths_escaped(capsys, tmp_path: Path, name: str, shown: str) -> None:
    path = tmp_path / name
    shutil.copy(SEED, path)
    code, out, err = run_main(capsys, "lut", "validate", str(path))
    assert code == 0 and err == ""
    assert out == f"{tmp_path}/{shown}: ok, 3 entries (h100)\n"
    path.write_text(SEED.read_text().replace("\n", "", 1))
    code, out, err = run_main(capsys, "lut", "fmt", str(path))
    assert (code, out, err) == (0, f"reformatted {tmp_path}/{shown}\n", "")
    code, out, err = run_main(capsys, "shapes", "--out", str(path), "--random", "2", "--no-models")
    assert code == 0 and out.startswith(f"{tmp_path}/{shown}: ") and out.count("\n") == 1
    code, out, err = run_main(capsys, "lut", "validate", str(tmp_path / f"missing{name}"))
    assert code == 2 and out == ""
    one_error_line(err, f"{tmp_path}/missing{shown}: no such LUT file")


def test_lut_show_escapes_notes(capsys, tmp_path: Path) -> None:
    path = tmp_path / "noted.json"
    path.write_text(SEED.read_text().replace('"note": "', '"note": "\\u001b[2J\\n', 1))
    code, out, err = run_main(capsys, "lut", "show", str(path))
    assert code == 0 and err == "" and "\x1b" not in out and "\\x1b[2J\\n" in out
    assert len(out.splitlines()) == 1 + load_lut(path).num_entries


def test_debug_prints_the_traceback_of_a_file_lut_validate_reports(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, out, err = run_main(capsys, "--debug", "lut", "validate", str(SEED), str(bad))
    assert code == 2 and out == f"{SEED}: ok, 3 entries (h100)\n"
    assert err.startswith("Traceback (most recent call last):") and "LUTError" in err
    assert err.splitlines()[-1].startswith(f"kernel-select: error: {bad}: line 1 column 2: invalid JSON")
    code, out, err = run_main(capsys, "lut", "validate", str(bad))
    assert code == 2 and "Traceback" not in err


# -- full disks --------------------------------------------------------------------------------

def test_a_full_disk_names_the_file_being_written(capsys, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out_path = tmp_path / "schema.json"

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    code, out, err = run_main(capsys, "lut", "schema", "--out", str(out_path))
    assert code == 2 and out == ""
    assert err == f"kernel-select: error: {out_path}: No space left on device\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", ["1", ""])  # print fails at once, or the final flush does
@pytest.mark.parametrize("argv", [["lut", "show", str(SEED)], ["lut", "show", str(SEED), "--json"],
                                  ["lut", "validate", str(SEED)], ["lut", "schema"]])
def test_printing_to_a_full_device_names_stdout(argv: list[str], unbuffered: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "kernel_select.cli", *argv], cwd=ROOT, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert done.stderr == "kernel-select: error: <stdout>: No space left on device\n"


# -- lut fmt: links, modes, read-only files, concurrent runs --------------------------------------

def _unformatted(path: Path) -> Path:
    path.write_text(SEED.read_text().replace("\n", "", 1))
    return path


def test_fmt_through_a_symlink_keeps_the_link_and_the_mode(capsys, tmp_path: Path) -> None:
    real = _unformatted(tmp_path / "real.json")
    real.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    assert run_main(capsys, "lut", "fmt", str(link)) == (0, f"reformatted {link}\n", "")
    assert link.is_symlink() and real.read_text() == SEED.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_fmt_refuses_read_only_and_hard_linked_files(capsys, tmp_path: Path) -> None:
    locked = _unformatted(tmp_path / "locked.json")
    locked.chmod(0o444)
    code, out, err = run_main(capsys, "lut", "fmt", str(locked))
    assert code == 2 and out == ""
    one_error_line(err, f"{locked}: cannot write: is read-only (mode 0444); make it writable")
    assert locked.read_text() != SEED.read_text()
    twin = tmp_path / "twin.json"
    os.link(_unformatted(tmp_path / "linked.json"), twin)
    code, out, err = run_main(capsys, "lut", "fmt", str(twin))
    assert code == 2
    one_error_line(err, f"{twin}: cannot write: has 2 hard links")
    assert twin.read_text() == (tmp_path / "linked.json").read_text() != SEED.read_text()


def test_concurrent_fmt_runs_on_one_file_all_succeed(tmp_path: Path) -> None:
    path = _unformatted(tmp_path / "shared.json")
    runs = [subprocess.Popen([sys.executable, "-m", "kernel_select.cli", "lut", "fmt", str(path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(4)]
    results = [(run.wait(120), *run.communicate()) for run in runs]
    assert [code for code, _, err in results] == [0] * 4, results
    assert path.read_text() == SEED.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def test_fmt_keeps_an_edit_saved_while_it_formats(capsys, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import kernel_select.lut as lut_package

    path = _unformatted(tmp_path / "edited.json")
    edit = SEED.read_text().replace('"note": "', '"note": "edited: ', 1)
    real_dump = lut_package.dump_lut

    def dump_then_edit(table):  # an editor saves between fmt's read and its write
        path.write_text(edit)
        return real_dump(table)

    monkeypatch.setattr(lut_package, "dump_lut", dump_then_edit)
    code, out, err = run_main(capsys, "lut", "fmt", str(path))
    assert code == 2 and out == ""
    one_error_line(err, f"{path}: changed while it was being formatted; the new content is kept")
    assert path.read_text() == edit


# -- eval with nothing to score ------------------------------------------------------------------

def test_eval_with_no_held_out_problem_exits_2(capsys, tmp_path: Path) -> None:
    frame = dataset.read(DATA)
    chosen = frame.loc[frame["split"] == "train", "problem_id"].unique()[:3]
    train_only = frame[frame["problem_id"].isin(chosen)]
    data = tmp_path / "train_only.parquet"
    dataset.write(pd.DataFrame(train_only), data)
    code, out, err = run_main(capsys, "eval", "--data", str(data), "--model", "analytical")
    assert code == 2 and out == ""
    one_error_line(err, f"{data}: nothing to evaluate (no problems in split 'test'; no problems in split "
                        "'family'; no problems in split 'unseen'); pass --split")


def test_a_row_end_to_end_in_a_fresh_interpreter() -> None:
    """The in-process runs above share the parser and guard of `python -m kernel_select.cli`."""
    result = run_cli("lut", "from-log", "/dev/zero")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("kernel-select: error: /dev/zero: is a character device, not a regular file; "
                             "pass the path of a log file (max-autotune's stderr)\n")
