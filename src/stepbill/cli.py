"""Command line: `stepbill bill|models|lab ...`. Formatting and argument parsing only; no arithmetic here."""

from __future__ import annotations

import sys

import click
import typer

from stepbill.errors import StepbillError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    help="The complete bill of one LLM training step: memory, FLOPs, checkpoint — with derivations.",
)


def _register_subcommands() -> None:
    from stepbill.lab.cli import app as lab_app

    app.add_typer(lab_app, name="lab", help="Optimizer, schedule, precision and collective mechanics of the seeds.")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; bad input becomes one line on stderr and exit code 2."""
    _register_subcommands()
    try:
        app(args=argv, standalone_mode=False)
    except StepbillError as exc:
        print(f"stepbill: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except click.exceptions.UsageError as exc:
        print(f"stepbill: error: {exc.format_message()}", file=sys.stderr)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)


if __name__ == "__main__":
    main()
