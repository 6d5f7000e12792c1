"""Escaping user-given text for a terminal: the one helper every error line and report uses.

A file name, a problem id or a JSON key read from a user's file may hold a newline, an ESC
sequence or a right-to-left override; printed raw, it moves the cursor, colors the terminal or
forges a second line. `printable` writes every such character as its Python escape, so the text is
shown on one line exactly as it is. It imports nothing of the package, so the LUT reader and the
runtime use it without loading the command line.
"""

from __future__ import annotations


def printable(text: object) -> str:
    """`text` with every unprintable character (newline, ESC, right-to-left override, NUL, a
    non-ASCII space) written as its escape (\\n, \\x1b, \\u202e)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
