"""``tracescore label``: human labels for one score, in the terminal; or in and out of files.

- The queue (``--metric NAME``): one record at a time — its query, contexts and answer, never
  the judge's verdict (it would anchor the annotator) — and a line-based prompt: ``y``/``n``
  for a yes/no metric or a number for a numeric one, ``s`` skips, ``b`` goes back, ``q``
  quits. Without a plan the queue is the records scored under that name that this annotator
  has not labelled, newest first. A record with no text (``capture_content=False``, stored
  compact, redacted away) says so instead of showing empty strings.
- ``--plan N`` chooses which N records to label (:mod:`tracescore.trust.plan`: stratified so
  the judge-corrected estimate is tight for the labels spent), stores the plan in
  ``label_plan`` and walks it; ``--plan-id ID`` walks a stored plan again (to finish it).
- ``--export FILE`` / ``--import FILE``: JSONL or CSV by extension, columns ``trace_id``,
  ``name``, ``value``, ``annotator``, ``comment``, ``created_at``. An import is checked in
  full first (trace ids, score names, values in the score's scale) and written in one
  transaction, or not at all.

Labels are written at once (this is a CLI, not the app's request path). Text reaches the
terminal through :func:`tracescore.reports.textfmt.printable` (no control characters).
"""

from __future__ import annotations

import csv
import json
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from .commands import DEFAULT_DB, _db_option, _n, _name, _output, main

#: what an export/import row holds, in order
COLUMNS = ("trace_id", "name", "value", "annotator", "comment", "created_at")
WIDTH = 100


class LabelProblem(click.ClickException):
    """Bad usage, a bad import file or an unusable database: exit code 2."""

    exit_code = 2


@main.command("label", short_help="Label records by hand; import or export labels.")
@_db_option(DEFAULT_DB, "Database: a SQLite file or a postgresql:// URL.")
@click.option("--metric", "metric", metavar="SCORE", default=None,
              help="The score to label (a score name, e.g. faithfulness).")
@click.option("--annotator", "annotator", metavar="NAME", default="", show_default=False,
              help="Who labels (a new label by the same annotator replaces the old one).")
@click.option("--plan", "plan_n", type=click.IntRange(min=1), metavar="N", default=None,
              help="Choose N records to label with a stratified plan (over the judge's "
                   "score and the segments), store it, and walk it.")
@click.option("--plan-id", "plan_id", metavar="ID", default=None,
              help="Walk a stored plan again (the records of it still unlabelled).")
@click.option("--seed", "seed", type=int, default=None,
              help="Seed of the plan's random draws (reproducible plans).")
@click.option("--import", "import_file", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Import labels from FILE (.jsonl or .csv).")
@click.option("--export", "export_file", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Export labels to FILE (.jsonl or .csv; '-' for JSONL on stdout); "
                   "with --metric, that score's only.")
def label(db: Path | str, metric: str | None, annotator: str, plan_n: int | None,
          plan_id: str | None, seed: int | None, import_file: Path | None,
          export_file: Path | None) -> None:
    """Label records by hand (an annotation queue in the terminal), or import/export labels.

    The queue shows each record's query, contexts and answer — not the judge's verdict —
    and takes y/n (yes/no metrics) or a number; s skips, b goes back, q quits.
    """
    if import_file is None and export_file is None and metric is None:
        raise LabelProblem("say which score to label (--metric NAME), or --import/--export")
    if isinstance(db, Path) and not db.exists() and import_file is None:
        raise LabelProblem(f"database not found: {db}")
    store = _open_store(db)
    try:
        if import_file is not None:
            n = _import(store, import_file)
            click.echo(f"imported {_n(n, 'label')} from {import_file} into {_name(db)}")
        if export_file is not None:
            n = _export(store, export_file, metric)
            if str(export_file) != "-":
                click.echo(f"exported {_n(n, 'label')} to {export_file}")
        if metric is not None and import_file is None and export_file is None:
            _queue(store, metric, annotator, plan_n, plan_id, seed)
    finally:
        store.close()


def _open_store(db: Path | str) -> Any:
    from ..store import open_store
    from ..store.base import redact_text

    try:
        return open_store(db)
    except Exception as exc:  # a database we cannot open or upgrade: say why, exit 2
        raise LabelProblem(redact_text(f"cannot open {_name(db)}: {exc}", db)) from None


def _scale(store: Any, metric: str) -> Any:
    from ..labels import declared_scales, scale_for

    try:
        return scale_for(metric, (), declared_scales(store))
    except (TypeError, ValueError) as exc:
        raise LabelProblem(str(exc)) from None


# -- files --------------------------------------------------------------------------------------
def _kind(path: Path) -> str:
    if str(path) == "-":
        return "jsonl"
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise LabelProblem(f"{path}: use a .jsonl or .csv file")


def _export(store: Any, path: Path, metric: str | None) -> int:
    kind = _kind(path)
    rows = [{c: r[c] for c in COLUMNS} for r in store.labels(name=metric)]
    with _output(path) as f:
        if kind == "jsonl":
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
    return len(rows)


def _read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line or row number, row) of an import file."""
    kind = _kind(path)
    try:
        with path.open(encoding="utf-8", newline="") as f:
            if kind == "jsonl":
                for i, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError as exc:
                        raise LabelProblem(f"{path} line {i}: not JSON ({exc})") from None
                    if not isinstance(obj, dict):
                        raise LabelProblem(f"{path} line {i}: expected a JSON object")
                    yield i, obj
            else:
                reader = csv.DictReader(f)
                missing = {"trace_id", "name", "value"} - set(reader.fieldnames or ())
                if missing:
                    raise LabelProblem(f"{path}: missing column(s) {', '.join(sorted(missing))}")
                for row in reader:
                    # CSV has no null: an empty comment/annotator/time is none given
                    yield reader.line_num, {k: (None if v == "" and k != "value" else v)
                                            for k, v in row.items() if k is not None}
    except OSError as exc:
        raise LabelProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LabelProblem(f"{path}: not UTF-8 text ({exc})") from None


def _import(store: Any, path: Path) -> int:
    """Check every row of ``path``, then write them all in one transaction."""
    from .._internal.validate import check_id
    from ..labels import check_text, label_value

    scales: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for i, row in _read_rows(path):
        where = f"{path} line {i}"
        try:
            name = row.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError("needs a score name (column 'name')")
            if name not in scales:
                scales[name] = _scale(store, name)
            value = row.get("value")
            if isinstance(value, str) and value.strip().lower() not in ("yes", "no", "y", "n"):
                value = float(value)  # a number written as text (CSV)
            created = row.get("created_at")
            created = None if created is None else float(created)
            if created is not None and not math.isfinite(created):
                raise ValueError(f"created_at must be a finite number, got {created!r}")
            out.append({"trace_id": check_id(row.get("trace_id"), 32, "trace_id"),
                        "name": name, "value": label_value(value, scales[name]),
                        "annotator": check_text(row.get("annotator"), "annotator") or "",
                        "comment": check_text(row.get("comment"), "comment"),
                        "created_at": created, "source": "import"})
        except LabelProblem as exc:
            raise LabelProblem(f"{where}: {exc.message}") from None
        except (TypeError, ValueError) as exc:
            raise LabelProblem(f"{where}: {exc}") from None
    return int(store.add_labels(out))


# -- the queue ----------------------------------------------------------------------------------
#: The records scored under a name that this annotator has not labelled, newest first.
_UNLABELLED = (
    "SELECT r.record_id, r.trace_id FROM scores s JOIN records r ON r.record_id = s.record_id"
    " WHERE s.name = ? AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.trace_id = r.trace_id"
    " AND l.name = ? AND l.annotator = ?) ORDER BY r.created_at DESC, r.record_id")
#: A trace's record scored under a name (the one a plan row stands for).
_RECORD_OF_TRACE = (
    "SELECT r.record_id FROM records r JOIN scores s ON s.record_id = r.record_id"
    " AND s.name = ? WHERE r.trace_id = ? ORDER BY r.created_at LIMIT 1")


def _queue(store: Any, metric: str, annotator: str, plan_n: int | None, plan_id: str | None,
           seed: int | None) -> None:
    from ..store.rollup import qmark

    scale = _scale(store, metric)
    conn = qmark(store)
    source = "manual"
    if plan_n is not None or plan_id is not None:
        if plan_id is None:
            plan_id = _make_plan(store, metric, int(plan_n or 0), seed)
        rows = store.label_plan(plan_id)
        if not rows:
            raise LabelProblem(f"no plan {plan_id!r} in {_name(store.path)}")
        source = f"plan:{plan_id}"
        done = {(r["trace_id"]) for r in store.labels(name=metric)
                if r["annotator"] == annotator}
        items = []
        for r in rows:
            if r["name"] != metric or r["trace_id"] in done:
                continue
            found = conn.execute(_RECORD_OF_TRACE, (metric, r["trace_id"])).fetchone()
            items.append((None if found is None else found[0], r["trace_id"]))
    else:
        items = [(r[0], r[1]) for r in conn.execute(_UNLABELLED, (metric, metric, annotator))]
    if not items:
        click.echo(f"nothing to label for {metric!r}"
                   + (f" by {annotator!r}" if annotator else "") + ".")
        return
    _walk(store, scale, items, annotator, source)


def _make_plan(store: Any, metric: str, n: int, seed: int | None) -> str:
    """A plan of ``n`` records for ``metric`` (:func:`tracescore.trust.plan.make_plan`:
    stratified over the judge's score band × release), stored in ``label_plan``; its id.
    The population: every trace with an ok score of that name (its first record)."""
    import secrets

    from ..store.rollup import qmark
    from ..trust.plan import make_plan

    population: dict[str, tuple[str, float, str | None]] = {}
    for t, v, release in qmark(store).execute(
            "SELECT r.trace_id, s.value, g.release FROM scores s JOIN records r"
            " ON r.record_id = s.record_id LEFT JOIN segments g ON g.seg_id = r.seg_id"
            " WHERE s.name = ? AND s.status = 'ok' AND s.value IS NOT NULL"
            " ORDER BY r.created_at, r.record_id", (metric,)):
        population.setdefault(t, (t, float(v), None if release is None else f"release={release}"))
    seed = secrets.randbelow(2**31) if seed is None else seed
    try:
        plan = make_plan(population.values(), n, seed=seed)
    except ValueError as exc:
        raise LabelProblem(f"cannot plan {n} labels of {metric!r} from {len(population)} "
                           f"scored traces: {exc}") from None
    plan_id = f"{metric}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    store.add_label_plan(plan_id, plan.table_rows(plan_id, metric, time.time()))
    click.echo(f"plan {plan_id}: {_n(len(plan.rows), 'record')} to label for {metric!r}, "
               f"drawn from {plan.population} in {len(plan.strata)} "
               f"strat{'um' if len(plan.strata) == 1 else 'a'} "
               f"(seed {seed}; continue it later with --plan-id {plan_id})")
    for note in plan.notes:
        click.echo(f"  note: {note}")
    return plan_id


def _text_lines(rec: Any) -> list[str]:
    """What the annotator reads: query, contexts, answer — or why there is nothing."""
    from ..reports.textfmt import wrap

    if rec is None:
        return ["  (record not in the database: pruned or never stored)"]
    if not rec.content_captured:
        return ["  no text to label (capture_content=False)"]
    if rec.compact:
        return ["  no text to label (stored compact: not sampled, text not kept)"]
    if not rec.query and not rec.answer and not rec.contexts:
        return ["  no text to label (redacted)"]
    out = ["Query:", *wrap(rec.query or "(none)", WIDTH, "  ")]
    out.append(f"Contexts ({len(rec.contexts)}):")
    for i, c in enumerate(rec.contexts, 1):
        out.extend(wrap(f"[{i}] {c.text}", WIDTH, "  "))
    out += ["Answer:", *wrap(rec.answer or "(none)", WIDTH, "  ")]
    return out


def _has_text(rec: Any) -> bool:
    return (rec is not None and rec.content_captured and not rec.compact
            and bool(rec.query or rec.answer or rec.contexts))


def _walk(store: Any, scale: Any, items: list[tuple[str | None, str]], annotator: str,
          source: str) -> None:
    """The interactive loop over ``items`` ((record id, trace id), in order)."""
    from ..labels import label_value
    from ..reports.textfmt import clip

    given: dict[int, float] = {}
    i = 0
    labelled = 0
    keys = "y/n" if scale.binary else scale.describe()
    while 0 <= i < len(items):
        record_id, trace_id = items[i]
        rec = store.load_records([record_id]).get(record_id) if record_id else None
        click.echo("")
        click.echo(f"── {i + 1}/{len(items)} ── trace {trace_id} ── label {scale.name!r} "
                   f"({'yes/no' if scale.binary else 'number'})")
        for line in _text_lines(rec):
            click.echo(line)
        if i in given:
            click.echo(f"(your label: {_shown(given[i], scale)})")
        can_label = _has_text(rec)
        ask = (f"{keys}, s skip, b back, q quit" if can_label else "s skip, b back, q quit")
        try:
            answer = click.prompt(ask, default="", show_default=False).strip()
        except click.Abort:  # end of input (Ctrl-D) or Ctrl-C: stop, keeping what is stored
            click.echo("")
            break
        low = answer.lower()
        if low in ("q", "quit"):
            break
        if low in ("s", "skip", ""):
            i += 1
            continue
        if low in ("b", "back"):
            if i == 0:
                click.echo("(already at the first record)")
            i = max(0, i - 1)
            continue
        if not can_label:
            click.echo("nothing to label here: s skips, b goes back, q quits")
            continue
        try:
            raw: Any = answer
            if not scale.binary:
                raw = float(answer)
            value = label_value(raw, scale)
        except (TypeError, ValueError):
            click.echo(f"not a label: {clip(answer, 40)} — answer {keys}, or s/b/q")
            continue
        store.add_label(trace_id, scale.name, value, annotator=annotator or None,
                        source=source, created_at=time.time())
        given[i] = value
        labelled += 1
        click.echo(f"saved: {scale.name} = {_shown(value, scale)}")
        i += 1
    click.echo(f"{_n(labelled, 'label')} saved" + (f" by {annotator}" if annotator else "")
               + ".")


def _shown(value: float, scale: Any) -> str:
    if scale.binary:
        return "yes" if value else "no"
    return f"{value:g}"
