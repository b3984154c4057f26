"""`python -m seglog …` runs the `seglog` command (e.g. `python -m seglog serve --port 0`)."""

from seglog.cli.main import app

app(prog_name="seglog")
