"""Offline data-directory tools: `seglog verify DATA_DIR` and `seglog repair DATA_DIR`.

They read the files directly (`seglog.storage.verify`), never through a server.

- `verify` is read-only: it writes nothing and never takes the data-directory lock. It only
  *probes* the lock with a non-blocking shared `flock` that it drops at once, to warn when a
  server holds the directory: the check still runs, but the active WAL files, segments and
  snapshots may change underneath it, so an in-flight write can show up as a torn tail and
  files deleted meanwhile are listed as vanished. Stop the server for an authoritative result.
- `repair` reports the same and, without `--yes`, changes nothing and prints what it would
  do. With `--yes` it takes the data-directory lock (refusing if a server holds it) and
  quarantines + truncates (see docs/operations.md).

Exit status: 0 clean (warnings such as torn tails allowed) or repaired; 1 corruption found
(verify) or repairs needed but not applied (repair without `--yes`); 2 the tool could not
run (no such directory, directory in use for `repair`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from seglog.storage.datadir import LOCK_NAME, DataDir, DataDirInUse
from seglog.storage.fs import Fs, RealFs
from seglog.storage.verify import (
    RepairPlan,
    Report,
    apply_repairs,
    plan_repairs,
    verify_data_dir,
)

DATA_DIR = Annotated[Path, typer.Argument(help="The data directory (SEGLOG_DATA_DIR).")]
COLD_DIR = Annotated[
    Path | None,
    typer.Option("--cold-dir", envvar="SEGLOG_COLD_DIR", help="Cold tier root, if configured."),
]
AS_JSON = Annotated[bool, typer.Option("--json", help="Print a JSON document instead of text.")]
EXIT_CLEAN, EXIT_CORRUPT, EXIT_CANNOT_RUN = 0, 1, 2


def lock_holder(root: Path) -> str | None:
    """Who holds the data-directory lock ("pid=…"), or None when nobody does. Probes with a
    shared, non-blocking flock released at once: never exclusive, never writes."""
    path = root / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            content = os.pread(fd, 64, 0).decode(errors="replace").strip()
            return content or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _rel(p: Path, root: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(p.relative_to(root))
    return str(p)


def _report_json(r: Report, holder: str | None) -> dict[str, Any]:
    root = r.root
    return {
        "data_dir": str(root),
        "in_use_by": holder,
        "clean": not r.corrupt,
        "snapshots": [
            {"id": s.snap_id, "path": _rel(s.path, root), "valid": s.problem is None,
             "problem": s.problem, "topics": s.topics}
            for s in r.snapshots
        ],
        "recovery_snapshot": r.recovery_snapshot,
        "wal": [
            {
                "group": g.scan.key,
                "start": list(g.scan.start),
                "files": [
                    {"path": _rel(f.path, root), "start": f.start, "end": f.end,
                     "size": f.size, "frames": f.frames, "tail": f.tail}
                    for f in g.scan.files
                ],
                "frames": g.scan.valid_frames,
                "torn_tails": [{"path": _rel(p, root), "offset": o} for p, o in g.scan.torn_tails],
                "corruption": None if (c := g.scan.corruption) is None else {
                    "path": _rel(c.path, root), "offset": c.offset,
                    "valid_frames_after": c.valid_frames_after,
                },
                "absorbed_damage": [
                    {"path": _rel(p, root), "offset": o} for p, o in g.absorbed_damage
                ],
                "missing_files": g.missing_files,
            }
            for g in r.groups
        ],
        "segments": [
            {"topic_id": s.topic_id, "tier": s.tier, "first_seq": s.first_seq,
             "path": _rel(s.data_path, root), "records": s.records, "deleted": s.deleted,
             "problem": s.problem}
            for s in r.segments
        ],
        "topics": [
            {"topic_id": t.topic_id, "name": t.name, "head_seq": t.head_seq,
             "snapshot_records": t.snapshot_records, "wal_appends": t.wal_appends,
             "segments": t.segments, "segment_records": t.segment_records}
            for t in r.topics
        ],
        "leftovers": [_rel(p, root) for p in r.leftovers],
        "vanished": [_rel(p, root) for p in r.vanished],
        "lost": r.lost,
    }  # fmt: skip


def _print_report(r: Report, holder: str | None) -> None:
    echo, root = typer.echo, r.root
    if holder:
        echo(f"warning: {root} is in use by a running server ({holder}); results may be "
             "stale and in-flight writes may show as torn tails")  # fmt: skip
    echo(f"data directory {root}")
    echo(
        "snapshots:" if r.snapshots else "snapshots: none (recovery replays the WAL from the start)"
    )
    for snap in r.snapshots:
        state = "ok" if snap.problem is None else f"DAMAGED: {snap.problem}"
        used = "  <- recovery starts here" if snap.snap_id == r.recovery_snapshot else ""
        echo(f"  {_rel(snap.path, root)}  {state}  ({snap.topics} topics){used}")
    echo("wal:" if r.groups else "wal: no files")
    for g in r.groups:
        sc = g.scan
        echo(f"  group {sc.key or 'wal/'} from file {sc.start[0]} offset {sc.start[1]}: "
             f"{len(sc.files)} file(s), {sc.valid_frames} valid frame(s) to replay")  # fmt: skip
        for p, o in sc.torn_tails:
            echo(f"    warning: torn tail in {_rel(p, root)} at offset {o} "
                 "(recovery truncates it)")  # fmt: skip
        if (c := sc.corruption) is not None:
            echo(f"    CORRUPTION in {_rel(c.path, root)} at offset {c.offset}: "
                 f"{c.valid_frames_after} valid frame(s) after it")  # fmt: skip
        if g.missing_files is not None:
            echo(f"    MISSING FILES: {g.missing_files}")
        for p, o in g.absorbed_damage:
            echo(f"    warning: invalid bytes in {_rel(p, root)} at offset {o}, before the "
                 "recovery start (needed only if the newest snapshot is lost)")  # fmt: skip
    bad = [s for s in r.segments if s.problem]
    echo(f"segments: {len(r.segments)} checked, {len(bad)} damaged")
    for s in bad:
        echo(f"  DAMAGED {_rel(s.data_path, root)}: {s.problem}")
    for line in r.lost:
        echo(f"  LOST {line}")
    for p in r.leftovers:
        echo(f"  note: leftover {_rel(p, root)} (removed at the next startup)")
    for p in r.vanished:
        echo(f"  note: {_rel(p, root)} vanished during the check")
    if r.topics:
        echo("topics: id, name, snapshot head, snapshot records, WAL appends, segments, "
             "live segment records")  # fmt: skip
    for t in r.topics:
        head = "-" if t.head_seq is None else str(t.head_seq)
        echo(f"  {t.topic_id:08X}  {t.name or '?'}  {head}  {t.snapshot_records}  "
             f"{t.wal_appends}  {t.segments}  {t.segment_records}")  # fmt: skip
    echo("result: " + ("CORRUPT" if r.corrupt else "clean"))


def _plan_lines(plan: RepairPlan, root: Path) -> list[str]:
    lines: list[str] = []
    for _g, c, w in plan.wal:
        lines.append(f"copy {_rel(w.copied[0], root)} to {_rel(w.copied[1], root)}")
        lines += [f"move {_rel(s, root)} to {_rel(d, root)}" for s, d in w.moved]
        lines.append(
            f"truncate {_rel(c.path, root)} at offset {c.offset} "
            f"(loses {c.valid_frames_after} valid frame(s) after it"
            + (f" and {len(w.moved)} later file(s))" if w.moved else ")")
        )
    lines += [f"seal torn tail of {_rel(p, root)} at offset {o}" for p, o in plan.seal]
    lines += [f"move {_rel(s, root)} to {_rel(d, root)}" for s, d in plan.moves]
    for sv in plan.salvage:
        lines.append(f"copy {_rel(sv.data_path, root)} to {_rel(sv.copies[0], root)}")
        lines.append(f"copy {_rel(sv.idx_path, root)} to {_rel(sv.copies[1], root)}")
        lost = ", ".join(map(str, sv.lost[:20])) + (", …" if len(sv.lost) > 20 else "")
        lines.append(
            f"rewrite {_rel(sv.data_path, root)} and its index: a snapshot holds no other copy "
            f"of its records, so every intact frame is kept and the {len(sv.lost)} damaged "
            f"one(s) become deleted holes (loses seqs {lost or 'none'})"
        )
    return lines


def _usable(root: Path) -> bool:
    return root.is_dir() and any((root / n).exists() for n in ("wal", "meta", "topics", LOCK_NAME))


def _emit_json(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")


def verify_cmd(data_dir: DATA_DIR, cold_dir: COLD_DIR = None, as_json: AS_JSON = False) -> None:
    """Check every WAL frame, segment and snapshot checksum; read-only (exit 1 on corruption)."""
    if not _usable(data_dir):
        typer.echo(f"error: {data_dir} is not a seglog data directory", err=True)
        raise typer.Exit(EXIT_CANNOT_RUN)
    holder = lock_holder(data_dir)
    report = verify_data_dir(RealFs(), data_dir, cold_dir)
    if as_json:
        _emit_json(_report_json(report, holder))
    else:
        _print_report(report, holder)
        if report.corrupt:
            typer.echo(f"run `seglog repair {data_dir}` to see what a repair would do")
    raise typer.Exit(EXIT_CORRUPT if report.corrupt else EXIT_CLEAN)


def repair_cmd(
    data_dir: DATA_DIR,
    cold_dir: COLD_DIR = None,
    yes: Annotated[bool, typer.Option("--yes", help="Apply the repairs (else a dry run).")] = False,
    as_json: AS_JSON = False,
) -> None:
    """Quarantine and truncate what `verify` reports as damaged (only with --yes)."""
    if not _usable(data_dir):
        typer.echo(f"error: {data_dir} is not a seglog data directory", err=True)
        raise typer.Exit(EXIT_CANNOT_RUN)
    fs: Fs = RealFs()
    dd: DataDir | None = None
    if yes:
        try:
            dd = DataDir.open(fs, data_dir, cold_dir)
        except DataDirInUse as e:
            typer.echo(f"error: refusing to repair: {e} (stop the server first)", err=True)
            raise typer.Exit(EXIT_CANNOT_RUN) from None
    elif (holder := lock_holder(data_dir)) is not None:
        typer.echo(f"error: refusing to repair: {data_dir} is in use by a running server "
                   f"({holder}); stop it first", err=True)  # fmt: skip
        raise typer.Exit(EXIT_CANNOT_RUN)
    try:
        code = _repair(fs, data_dir, cold_dir, yes, as_json)
    finally:
        if dd is not None:
            dd.close()
    raise typer.Exit(code)


def _repair(fs: Fs, root: Path, cold: Path | None, yes: bool, as_json: bool) -> int:
    report = verify_data_dir(fs, root, cold)
    plan = plan_repairs(fs, report)
    lines = _plan_lines(plan, root)
    after: Report | None = None
    if yes and not plan.empty:
        apply_repairs(fs, plan)
        after = verify_data_dir(fs, root, cold)
    code = EXIT_CLEAN if plan.empty or (after is not None and not after.corrupt) else EXIT_CORRUPT
    if report.lost:  # only a backup repairs these
        code = EXIT_CORRUPT
    if as_json:
        _emit_json({
            "report": _report_json(report, None),
            "actions": lines,
            "applied": after is not None,
            "after": None if after is None else _report_json(after, None),
        })  # fmt: skip
        return code
    _print_report(report, None)
    if plan.empty:
        typer.echo("nothing to repair")
        for line in lines:  # what no repair can do
            typer.echo(f"  {line}")
        return code
    typer.echo("repair:" if after is not None else "repair would (re-run with --yes to apply):")
    for line in lines:
        typer.echo(f"  {line}")
    if after is not None:
        typer.echo("after repair: " + ("CORRUPT" if after.corrupt else "clean"))
    return code


def register_offline_commands(app: typer.Typer) -> None:
    """Add `verify` and `repair` to the `seglog` app."""
    app.command("verify")(verify_cmd)
    app.command("repair")(repair_cmd)
