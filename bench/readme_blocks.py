"""The benchmarks' results in bench/README.md: each between its own two markers, replaced whole by
the benchmark's last run (the prose around them stays as written)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).with_name("README.md")


def write_block(text: str, begin: str, end: str) -> None:
    """Put ``text`` between ``begin`` and ``end`` (appended with both when they are not there yet)."""
    body = README.read_text()
    block = f"{begin}\n{text}\n{end}"
    if begin in body:
        start, stop = body.index(begin), body.index(end) + len(end)
        body = body[:start] + block + body[stop:]
    else:
        body += f"\n{block}\n"
    README.write_text(body)
