"""The project's line-length rule, checked on every run: ruff is not part of the CI image, so this test is
what keeps kernel_select/ and tests/ at most MAX_LINE characters per line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("kernel_select", "tests")
MAX_LINE = 110


def long_lines(root: Path, folders: tuple[str, ...] = SCANNED, limit: int = MAX_LINE) -> list[str]:
    """`file:line (length)` of every line over `limit` characters in the .py files under `folders`."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if len(line) > limit:
                    found.append(f"{name}:{number} ({len(line)})")
    return found


def test_no_line_is_longer_than_the_limit():
    offenders = long_lines(ROOT)
    assert not offenders, f"lines over {MAX_LINE} characters:\n" + "\n".join(offenders)


def test_the_scan_reports_file_and_line_of_each_offender(tmp_path: Path):
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    (package / "a.py").write_text("ok = 1\n" + "x" * 11 + "\n" + "y" * 10 + "\n", encoding="utf-8")
    (package / "notes.txt").write_text("z" * 50 + "\n", encoding="utf-8")
    (tmp_path / "pkg" / "b.py").write_text("# " + "\u00e9" * 8 + "\n", encoding="utf-8")  # 10 characters
    assert long_lines(tmp_path, ("pkg",), limit=10) == ["pkg/sub/a.py:2 (11)"]
