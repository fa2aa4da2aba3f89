"""`stepbill lab <topic>` commands."""

import typer

app = typer.Typer(no_args_is_help=True, help="Optimizer, schedule, precision and collective mechanics.")
