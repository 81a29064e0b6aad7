"""How deep YAML flow collections (``[...]``, ``{...}``) nest, measured before the parser runs.

Why before the parser: a run of ``[`` makes libyaml's scanner look ahead through all of it, to
its own nesting limit (PyYAML 6.0.3 and later). Measured here first, the limit and its message
read the same whichever parser version is installed; the bounded composer of ``rollout.inputs``
bounds the rest (block nesting, aliases, values). Pure.
"""

from __future__ import annotations

import re

_FLOW_MARKS = re.compile(r"""[\[\]{}'"#\n]""")
_BLOCK_SCALAR_HEADER = re.compile(r"(?:^|[\s:?-])[|>][1-9+-]{0,2}[ \t]*(?:#.*)?$")


def flow_too_deep_at(text: str, limit: int) -> int | None:
    """The line where flow collections (``[...]``, ``{...}``) nest deeper than ``limit``, or None.

    A bracket opens a collection where YAML reads it as one: anywhere inside a flow collection,
    and in block context only where a node starts (after indentation, ``- ``, ``: ``, ``? ``).
    Quoted scalars, comments and block scalars (``|``, ``>``) are skipped. One pass, O(length).
    """
    depth, line, line_start, pos = 0, 1, 0, 0
    while (match := _FLOW_MARKS.search(text, pos)) is not None:
        at, mark = match.start(), match.group()
        pos = at + 1
        if mark == "\n":
            ended = text[line_start:at]
            line, line_start = line + 1, at + 1
            if depth == 0 and _BLOCK_SCALAR_HEADER.search(_uncommented(ended)):
                pos, line = _skip_block_scalar(text, pos, line, indent=_indent(ended))
                line_start = pos
        elif mark == "#":
            if at == 0 or text[at - 1] in " \t":
                pos = _end_of_line(text, at)
        elif not _starts_node(text, at, line_start=line_start, in_flow=depth > 0):
            continue
        elif mark in "'\"":
            pos = _end_of_quoted(text, at)
            newlines = text.count("\n", at, pos)
            if newlines:
                line, line_start = line + newlines, text.rfind("\n", at, pos) + 1
        elif mark in "[{":
            depth += 1
            if depth > limit:
                return line
        else:  # "]" or "}" inside a flow collection: it ends one
            depth -= 1
    return None


def _starts_node(text: str, at: int, *, line_start: int, in_flow: bool) -> bool:
    if in_flow:
        return text[at] in "]}" or _previous_mark(text, at) in "[{,:?"
    if text[at] in "]}":
        return False
    i = at - 1
    while i >= line_start and text[i] in " \t":
        i -= 1
    if i < line_start:
        return True  # only indentation before it
    spaced = i < at - 1
    return spaced and (text[i] in ":-?")  # after "- ", ": ", "? " (and "--- ")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _previous_mark(text: str, at: int) -> str:
    """The last character before ``at`` that is not white space ('' at the start of the text)."""
    i = at - 1
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    return text[i] if i >= 0 else ""


def _end_of_quoted(text: str, at: int) -> int:
    """Just past the quoted scalar that starts at ``at`` (the end of the text if unclosed)."""
    quote, i = text[at], at + 1
    while (i := text.find(quote, i)) != -1:
        if quote == "'" and text.startswith("''", i):
            i += 2
        elif quote == '"' and _escaped(text, i):
            i += 1
        else:
            return i + 1
    return len(text)


def _escaped(text: str, at: int) -> bool:
    i = at - 1
    while i >= 0 and text[i] == "\\":
        i -= 1
    return (at - 1 - i) % 2 == 1


def _end_of_line(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end == -1 else end


def _uncommented(line: str) -> str:
    return re.sub(r"(^|[ \t])#.*$", "", line).rstrip()


def _skip_block_scalar(text: str, start: int, line: int, *, indent: int) -> tuple[int, int]:
    """Past the content of a block scalar whose header line (indented ``indent``) ended just
    before ``start``: every following line that is blank or indented deeper."""
    pos = start
    while pos < len(text):
        end = _end_of_line(text, pos)
        body = text[pos:end]
        if body.strip() and _indent(body) <= indent:
            break
        pos, line = end + 1, line + 1
    return min(pos, len(text)), line
