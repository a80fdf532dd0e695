"""Statements rendered once for the driver: SQLAlchemy's own text, parameter order and bind processing.

The hot path (enqueue, claim, start, heartbeat, the finishing moves) runs the same statements the
builders in statements/ make, but without SQLAlchemy's per-call execution layer (compile-cache
lookup, execution context, Row objects). What SQLAlchemy would hand the driver is worked out here once per statement
shape and dialect, from SQLAlchemy's own compiler: the text, which value goes in which position, the
type processors that turn Python values into driver values, the types given to ``setinputsizes``
(pyodbc) and the processors that turn result columns back (SQLite's text timestamps). Per call only
the values are bound; tests/integration/test_executor.py and tests/driver/test_executor.py hold it
byte for byte to what SQLAlchemy sends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from chokaq.storage.dialects import profile_of
from chokaq.storage.sqlfuncs import ListParam

Processor = Callable[[Any], Any] | None
Rows = list[tuple[Any, ...]]  # result rows as tuples, by position


@dataclass(frozen=True, slots=True)
class Rendered:
    """One statement as the driver takes it.

    ``sources``: for each parameter the driver gets, in order, the caller's parameter name and the
    item of it (an expanded ``IN`` list, SQLAlchemy's ``name_1, name_2, ...``), or -1 for the whole
    value. ``keys``: the driver's names for them (pyformat dialects take a dict). ``defaults``: the
    values the statement itself carries (a LIMIT, a literal number).
    """

    sql: str
    sources: tuple[tuple[str, int], ...]
    keys: tuple[str, ...]
    processors: tuple[Processor, ...]
    defaults: Mapping[str, Any]
    positional: bool
    inputsizes: list[tuple[Any, Any, Any]] | None
    results: tuple[Processor, ...] | None
    # Indexes of parameters that hold a list bound as one PostgreSQL array (see array_literal).
    arrays: frozenset[int]
    # PostgreSQL: the statement returns rows (RETURNING, a final SELECT), so they are fetched
    # without asking the cursor first: psycopg builds a Column object per column each time its
    # ``description`` is read, about a microsecond per job for the claim's eighteen columns.
    # Elsewhere the cursor is asked (SQL Server's batches may lead with a row count).
    returns_rows: bool = False

    def bind(self, params: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        values: list[Any] = []
        for i, ((name, item), process) in enumerate(zip(self.sources, self.processors, strict=True)):
            value = params[name] if name in params else self.defaults[name]
            if item >= 0:
                value = value[item]
            if i in self.arrays:
                literal = array_literal(value)
                if literal is not value:
                    values.append(literal)
                    continue
            if process is not None:
                value = process(value)
            values.append(value)
        if self.positional:
            return tuple(values)
        return dict(zip(self.keys, values, strict=True))

    def rows(self, fetched: list[Any]) -> Rows:
        """Result rows as tuples, by position, through the columns' result processors if any."""
        if self.results is None:
            # psycopg and sqlite3 give tuples already; pyodbc gives Row objects.
            return fetched if not fetched or type(fetched[0]) is tuple else [tuple(r) for r in fetched]
        procs = self.results
        return [tuple(v if p is None else p(v) for p, v in zip(procs, r, strict=True)) for r in fetched]


def array_literal(items: Any) -> Any:
    """A list of strings as one PostgreSQL array literal (``{"a","b"}``), or the list itself.

    psycopg's list dumper costs a regular-expression search per item; the literal is one join, and
    the statement's ``CAST(... AS VARCHAR(n)[])`` makes the server parse it into the same array.
    Inside double quotes only ``"`` and ``\\`` are special, so an id that holds either goes to the
    driver's dumper instead, as does anything that is not a plain list of strings.
    """
    if not isinstance(items, list):
        return items
    try:
        every = "".join(items)  # a TypeError for anything but strings, without a check per item
    except TypeError:
        return items
    if '"' in every or "\\" in every:
        return items
    return '{"' + '","'.join(items) + '"}' if items else "{}"


def render(
    stmt: Any, dialect: Dialect, sample: Mapping[str, Any], schema_translate_map: Mapping[str | None, str | None] | None
) -> Rendered:
    """Render ``stmt`` for ``dialect`` as SQLAlchemy would execute it with parameters shaped like
    ``sample`` (the lengths of its expanding lists are part of the shape)."""
    compiled = stmt.compile(
        dialect=dialect,
        schema_translate_map=schema_translate_map or None,
        render_schema_translate=bool(schema_translate_map),
    )
    if not isinstance(compiled, SQLCompiler) or compiled.escaped_bind_names:
        raise NotImplementedError("the executor takes plain SQL statements with plain parameter names")
    for bind in compiled.literal_execute_params:
        if compiled.bind_names[bind] in sample:
            # Rendered into the text (SQL Server's TOP n): a value per call would need a text per call.
            raise NotImplementedError(f"parameter {compiled.bind_names[bind]!r} is rendered into the statement")
    # Only what the statement itself carries: a parameter the caller passed once must be passed
    # every time (a KeyError, never the first call's value).
    carried = compiled.construct_params(dict(sample), escape_names=False)
    defaults = {k: v for k, v in carried.items() if k not in sample}
    expanded = compiled.construct_expanded_state(dict(sample), escape_names=False)
    names = list(expanded.positiontup or ()) if compiled.positional else list(expanded.parameters)
    # SQLAlchemy's own bind processors, keyed by the names it sends (expanded items included).
    all_processors = {**compiled._bind_processors, **expanded.processors}
    origin = _expanded_origins(compiled, sample)
    sources = tuple(origin.get(n, (n, -1)) for n in names)
    for name, _ in sources:
        if name not in defaults and name not in sample:
            raise NotImplementedError(f"parameter {name!r} has no source")
    profile = profile_of(dialect)
    arrays_native = profile.list_arrays
    arrays = frozenset(
        i
        for i, (name, item) in enumerate(sources)
        if arrays_native and item < 0 and isinstance(_bind_type(compiled, name), ListParam)
    )
    processors = tuple(cast(Processor, all_processors.get(n)) for n in names)
    return Rendered(
        sql=expanded.statement,
        sources=sources,
        keys=tuple(names),
        processors=processors,
        defaults=defaults,
        positional=compiled.positional,
        inputsizes=_inputsizes(compiled, dialect, names, origin),
        results=_result_processors(compiled, dialect),
        arrays=arrays,
        returns_rows=profile.fetch_returning and bool(compiled._result_columns),
    )


def _bind_type(compiled: SQLCompiler, name: str) -> Any:
    bind = compiled.binds.get(name)
    return None if bind is None else bind.type


def _expanded_origins(compiled: SQLCompiler, sample: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """SQLAlchemy's names for the items of expanding parameters (``name_1`` ...) -> (name, index)."""
    out: dict[str, tuple[str, int]] = {}
    for bind, name in compiled.bind_names.items():
        if bind.expanding:
            for i in range(len(sample[name])):
                out[f"{name}_{i + 1}"] = (name, i)
    return out


def _inputsizes(
    compiled: SQLCompiler, dialect: Dialect, names: list[str], origin: Mapping[str, tuple[str, int]]
) -> list[tuple[Any, Any, Any]] | None:
    """What SQLAlchemy passes to pyodbc's ``setinputsizes`` (BindTyping.SETINPUTSIZES dialects)."""
    from sqlalchemy.engine.interfaces import BindTyping

    if dialect.bind_typing is not BindTyping.SETINPUTSIZES:
        return None
    lookup: Any = compiled._get_set_input_sizes_lookup()  # type: ignore[no-untyped-call]
    if lookup is None:
        return None
    if origin:
        raise NotImplementedError("setinputsizes for expanding parameters is not needed on the hot path")
    binds = [compiled.binds[n] for n in names]
    sizes = [lookup[b] for b in binds]
    if not any(s is not None for s in sizes):
        return None
    # pyodbc's form, as the pyodbc connector's do_set_input_sizes builds it (SQL Server: text
    # declared with its column's length, dialects/sqlserver_sizes.py).
    profile = profile_of(dialect)
    return [profile.input_size(s, b.type) for s, b in zip(sizes, binds, strict=True)]


def _result_processors(compiled: SQLCompiler, dialect: Dialect) -> tuple[Processor, ...] | None:
    """Per result column, the type's result processor (None when no column has one)."""
    columns = compiled._result_columns
    if not columns:
        return None
    procs = tuple(c[3].dialect_impl(dialect).result_processor(dialect, None) for c in columns)
    return procs if any(p is not None for p in procs) else None


def expanding_names(
    stmt: Any, dialect: Dialect, schema_translate_map: Mapping[str | None, str | None] | None
) -> tuple[str, ...]:
    """The expanding (``IN``) parameters of ``stmt``: their lengths make statement shapes."""
    compiled = stmt.compile(dialect=dialect, schema_translate_map=schema_translate_map or None)
    return tuple(sorted(name for bind, name in compiled.bind_names.items() if bind.expanding))
