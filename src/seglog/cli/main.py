"""The `seglog` command (also `python -m seglog`). `serve` starts the server through
`seglog.server`, the composition root, imported only when `serve` runs (that module never
imports the CLI back); the offline tools
(`verify`, `repair`) read a data directory through the storage layer, never through an
engine; every other command talks to a running server through the public client only."""

from __future__ import annotations

import enum
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from seglog.cli.commands import register_client_commands
from seglog.cli.offline import register_offline_commands
from seglog.cli.output import describe_error, err
from seglog.client import SeglogClientError


class SeglogApp(typer.Typer):
    """The root app. A client error that escapes a command (none should: each command wraps
    its calls in `client_errors`) still becomes one line and exit code 1, never a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except SeglogClientError as e:
            err.print(f"seglog: error: {describe_error(e, _url_from_env())}", markup=False)
            sys.exit(1)


class CompletionShell(enum.StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"
    pwsh = "pwsh"


def _url_from_env() -> str:
    return os.environ.get("SEGLOG_URL", "http://127.0.0.1:4000")


app = SeglogApp(
    name="seglog",
    help="seglog: a persistent single-node event log.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from seglog import __version__

        typer.echo(f"seglog {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """seglog: a persistent single-node event log. Client commands talk to the server at
    --url (env SEGLOG_URL, default http://127.0.0.1:4000) with --api-key (SEGLOG_API_KEY)."""


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind host (SEGLOG_HOST); host:port accepted.")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Bind port (SEGLOG_PORT); 0 = any free port.")
    ] = None,
    port_file: Annotated[
        Path | None, typer.Option(help="Write the bound host:port here once listening.")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Data directory (SEGLOG_DATA_DIR).")] = None,
    cold_dir: Annotated[Path | None, typer.Option(help="Cold tier root (SEGLOG_COLD_DIR).")] = None,
    wal_shards: Annotated[int | None, typer.Option(help="WAL shards (SEGLOG_WAL_SHARDS).")] = None,
    log_level: Annotated[str | None, typer.Option(help="Log level (SEGLOG_LOG).")] = None,
) -> None:
    """Run the server (HTTP/1.1 and h2c on one port) until SIGTERM/SIGINT."""
    from seglog.config import Settings
    from seglog.server import main

    settings = Settings.from_env().with_overrides(
        host=host,
        port=port,
        port_file=port_file,
        data_dir=data_dir,
        cold_dir=cold_dir,
        wal_shards=wal_shards if wal_shards else None,
        log_level=log_level,
    )
    raise typer.Exit(main(settings))


@app.command()
def completion(
    shell: Annotated[
        CompletionShell, typer.Argument(help="The shell to print the completion script for.")
    ],
) -> None:
    """Print the completion script for SHELL, e.g. `eval "$(seglog completion bash)"`.
    Unlike --show-completion, which detects the shell from the parent processes, this works
    anywhere (scripts, containers, CI)."""
    from typer._completion_shared import get_completion_script  # what --show-completion uses

    typer.echo(
        get_completion_script(
            prog_name="seglog", complete_var="_SEGLOG_COMPLETE", shell=shell.value
        )
    )


register_client_commands(app)
register_offline_commands(app)
