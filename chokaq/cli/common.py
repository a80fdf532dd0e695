"""What every ``chokaq`` subcommand shares: the context object (``Ctx``, which loads the app once),
``--app`` on a subcommand, and the one-line error handling. Its own module so that the command
modules and ``main`` (which registers them) import it instead of each other."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from chokaq.domain.errors import ChokaQError, ConfigurationError, JobValidationError
from chokaq.loading import load_app
from chokaq.operations.service import Operations
from chokaq.redact import redact
from chokaq.runtime.app import ChokaQ

F = TypeVar("F", bound=Callable[..., Any])


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def friendly_errors(fn: F) -> F:
    """Expected failures become one line on stderr and a non-zero exit, not a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigurationError as exc:
            click.echo(f"error: {redact(str(exc))}", err=True)
            sys.exit(2)
        except ArgumentError as exc:  # SQLAlchemy could not make sense of the URL
            click.echo(f"error: invalid storage URL: {redact(one_line(exc))}", err=True)
            sys.exit(2)
        except (JobValidationError, ValidationError) as exc:
            if isinstance(exc, ValidationError):
                msg = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
            else:
                msg = str(exc)
            click.echo(f"error: invalid input: {redact(msg)}", err=True)
            sys.exit(2)
        except ChokaQError as exc:
            click.echo(f"error: {redact(str(exc))}", err=True)
            sys.exit(1)
        except (OperationalError, DBAPIError) as exc:
            orig = getattr(exc, "orig", None) or exc
            click.echo(f"error: database unavailable or refused the request: {redact(one_line(orig))}", err=True)
            sys.exit(3)
        except ValueError as exc:  # e.g. a URL port that is not a number, deep inside a driver
            click.echo(f"error: invalid setting: {redact(one_line(exc))}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


class Ctx:
    def __init__(self, db: str | None, app_spec: str | None) -> None:
        self.db = db
        self.app_spec = app_spec
        self._app: ChokaQ | None = None
        self._ops: Operations | None = None

    @property
    def app(self) -> ChokaQ:
        if self._app is None:
            self._app = load_app(self.app_spec, db=self.db)
        return self._app

    @property
    def operations(self) -> Operations:
        """The operator actions, audited as the API's are. They announce nothing: no event stream
        is served from a CLI process, so its bus would have no subscriber. Events are only hints;
        the database is the truth, and the Deck shows a CLI change on its next stats tick or reload."""
        if self._ops is None:
            self._ops = Operations(self.app, announce=False)
        return self._ops


pass_ctx = click.make_pass_decorator(Ctx)


def app_option(fn: F) -> F:
    """``--app`` on a subcommand too (``chokaq worker --app pkg.module:app``); it wins over the group's."""

    def remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value:
            ctx.ensure_object(Ctx).app_spec = value
        return value

    return click.option(
        "--app",
        "app_override",
        expose_value=False,
        callback=remember,
        is_eager=True,
        help="Your app as pkg.module:attribute.",
    )(fn)
