"""The `seglog` command (also `python -m seglog`). `serve` starts the server through
`seglog.server`, the composition root, imported only when `serve` runs (that module never
imports the CLI back); the offline tools
(`verify`, `repair`) read a data directory through the storage layer, never through an
engine; every other command talks to a running server through the public client only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seglog.cli.commands import register_client_commands
from seglog.cli.offline import register_offline_commands

app = typer.Typer(
    name="seglog",
    help="seglog: a persistent single-node event log.",
    no_args_is_help=True,
    add_completion=False,
)


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


register_client_commands(app)
register_offline_commands(app)
