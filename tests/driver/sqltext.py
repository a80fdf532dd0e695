"""Reading SQL Server statement text: where each ``?`` parameter sits.

SQL Server has to type every parameter of a statement it is asked to describe
(``sp_describe_undeclared_parameters``, which pyodbc's fast_executemany and NULL binds trigger).
A parameter in a comparison, a SET, a VALUES row or an IN list takes the other side's type; one
that is an operand of arithmetic or an argument of a function may not be typable at all (two
untyped operands of ``-``, ``FLOOR(?)``), and the description of the whole statement fails.
``CAST(? AS type)`` declares the type and is always fine.
"""

from __future__ import annotations

import re

ARITHMETIC = set("+-*/%")
# Words before "(" that open a list or a subquery, not a function call.
NOT_FUNCTIONS = {
    "IN", "VALUES", "TOP", "AS", "WITH", "AND", "OR", "NOT", "WHERE", "ON", "SELECT", "FROM", "JOIN",
    "SET", "THEN", "ELSE", "WHEN", "CASE", "EXISTS", "UNION", "ALL", "BY", "OUTPUT", "INTO", "FETCH",
}  # fmt: skip
_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\])\s*$")


def normalise(sql: str) -> str:
    """Named and expanding parameters as ``?`` (the text SQLAlchemy hands pyodbc)."""
    sql = re.sub(r"\(__\[POSTCOMPILE_\w+\]\)", "(?)", sql)
    sql = re.sub(r"__\[POSTCOMPILE_\w+\]", "?", sql)
    return re.sub(r"(?<![:\w]):[A-Za-z_]\w*", "?", sql)


def _blank_strings(sql: str) -> str:
    """String literals replaced by blanks of the same length (so positions still match)."""
    return re.sub(r"'(?:[^']|'')*'", lambda m: "'" + " " * (len(m.group(0)) - 2) + "'", sql)


def _closer(text: str, open_: int) -> int:
    depth = 0
    for i in range(open_, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses")


def _function_before(text: str, open_: int) -> str | None:
    """The function name before the "(" at ``open_``, or None for a list, a subquery, a grouping."""
    m = _WORD.search(text[:open_])
    if m is None or m.group(1) == "]" or m.group(1).upper() in NOT_FUNCTIONS:
        return None
    return m.group(1)


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a parameter's span over parentheses that only group: "((?))" is still the bare parameter."""
    while True:
        left = text[:start].rstrip()
        right = text[end:].lstrip()
        if not (left.endswith("(") and right.startswith(")")):
            return start, end
        open_ = len(left) - 1
        if _function_before(text, open_) is not None:
            return start, end
        start, end = open_, _closer(text, open_) + 1


def _enclosing_open(text: str, left: str) -> int:
    """The index of the "(" whose argument list ``left`` (ending in "(" or ",") is inside, or -1."""
    i = len(left) - 1
    if left.endswith("("):
        return i
    depth = 0
    while i >= 0:
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                return i
            depth -= 1
        i -= 1
    return i


def _untyped_use(text: str, start: int, end: int) -> str | None:
    """What makes the parameter at ``text[start:end]`` untyped, or None when it is typed or plain."""
    left = text[:start].rstrip()
    right = text[end:].lstrip()
    if left.endswith("(") and _function_before(text, len(left) - 1) == "CAST" and right.upper().startswith("AS "):
        return None
    if (left and left[-1] in ARITHMETIC) or (right and right[0] in ARITHMETIC):
        return "arithmetic"
    # An argument: directly after "name(" or after a comma inside "name(...)".
    if not (left.endswith("(") or left.endswith(",")):
        return None
    i = _enclosing_open(text, left)
    name = _function_before(text, i) if i >= 0 else None
    if name is not None and name.upper() != "CAST":
        return f"argument of {name}"
    return None


def untyped_operands(sql: str) -> list[str]:
    """Each ``?`` that is an operand of arithmetic or an argument of a function (not CAST ... AS),
    described with the text around it."""
    text = _blank_strings(normalise(sql))
    found = []
    for m in re.finditer(r"\?", text):
        use = _untyped_use(text, *_widen(text, m.start(), m.end()))
        if use is not None:
            where = sql[max(0, m.start() - 60) : m.end() + 40].replace("\n", " ")
            found.append(f"{use}: ...{where}...")
    return found


def parameter_count(sql: str) -> int:
    """Parameter markers outside string literals."""
    return _blank_strings(normalise(sql)).count("?")
