"""``tracescore label``: human labels for one score, in the terminal; or in and out of files.

- The queue (``--metric NAME``): one **record** at a time (a label is about the record the
  annotator read: a trace with two records is shown, and labelled, twice) — its query, its
  contexts (each clipped to :data:`CONTEXT_CHARS` characters, saying how many more there are)
  and its answer, never the judge's verdict (it would anchor the annotator) — and a line-based
  prompt: ``y``/``n`` for a yes/no metric or a number for a numeric one, ``s`` skips, ``b``
  goes back, ``q`` quits. Without a plan the queue is the records scored under that name that
  this annotator has not labelled, newest first. A record with no text
  (``capture_content=False``, stored compact, redacted away) says so instead of showing empty
  strings. The count printed at the end is the records labelled (a record labelled again
  after going back counts once: its label was replaced).
- ``--plan N`` chooses which N records to label (:mod:`tracescore.trust.plan`: stratified over
  the judge's score band × the release, so the judge-corrected estimate is tight for the
  labels spent), stores the plan in ``label_plan`` and walks it; ``--plan-id ID`` walks a
  stored plan again (to finish it). Records without text to label are not in the plan's
  population (the count left out is printed).
- ``--export FILE`` / ``--import FILE``: JSONL or CSV by extension, columns ``trace_id``,
  ``record_id``, ``name``, ``value``, ``annotator``, ``comment``, ``created_at`` (a CSV saved
  by Excel with a byte order mark is read too). An import is read as it goes, checked (ids,
  score names, values in the score's scale) and written in one transaction, or not at all:
  memory holds :data:`IMPORT_CHUNK` labels, whatever the file's size. Labels whose trace (or record) is not in the database are
  stored — their records may arrive later — and counted in the output; ``--strict`` refuses
  such an import instead. A CSV export neutralises formula cells as ``tracescore export
  --format csv`` does (and shows control characters as visible escapes); ``--raw-csv`` writes
  the cells exactly as stored.

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

from ._options import DEFAULT_DB, _db_option, _n, _name, _output
from .commands import main

#: what an export/import row holds, in order
COLUMNS = ("trace_id", "record_id", "name", "value", "annotator", "comment", "created_at")
WIDTH = 100
#: characters of each context (and of the query and the answer) shown in the queue
CONTEXT_CHARS = 2000


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
                   "score band and the release), store it, and walk it. Records without "
                   "text to label are left out.")
@click.option("--plan-id", "plan_id", metavar="ID", default=None,
              help="Walk a stored plan again (the records of it still unlabelled).")
@click.option("--seed", "seed", type=int, default=None,
              help="Seed of the plan's random draws (reproducible plans; with --plan).")
@click.option("--import", "import_file", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Import labels from FILE (.jsonl or .csv).")
@click.option("--export", "export_file", metavar="FILE", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Export labels to FILE (.jsonl or .csv; '-' for JSONL on stdout); "
                   "with --metric, that score's only.")
@click.option("--strict", "strict", is_flag=True,
              help="--import: refuse the file when a label's trace or record is not in the "
                   "database (by default such labels are stored and counted).")
@click.option("--raw-csv", "raw_csv", is_flag=True,
              help="CSV export: write text cells exactly as stored. By default a cell "
                   "starting with =, +, -, @, a tab or a carriage return gets a leading ' "
                   "(a spreadsheet shows it as text) and control characters are escaped.")
def label(db: Path | str, metric: str | None, annotator: str, plan_n: int | None,
          plan_id: str | None, seed: int | None, import_file: Path | None,
          export_file: Path | None, strict: bool, raw_csv: bool) -> None:
    """Label records by hand (an annotation queue in the terminal), or import/export labels.

    The queue shows each record's query, contexts and answer — not the judge's verdict —
    and takes y/n (yes/no metrics) or a number; s skips, b goes back, q quits.
    """
    if import_file is None and export_file is None and metric is None:
        raise LabelProblem("say which score to label (--metric NAME), or --import/--export")
    if seed is not None and plan_n is None:
        raise click.UsageError("--seed only applies to a new plan: use it with --plan N")
    if "://" not in str(db) and not Path(db).exists():
        raise LabelProblem(f"database not found: {db} (labels go into the database holding "
                           "the scored records)")
    store = _open_store(db)
    try:
        if import_file is not None:
            n, unknown = _import(store, import_file, strict)
            click.echo(f"imported {_n(n, 'label')} from {import_file} into {_name(db)}")
            if unknown:
                click.echo(f"  {unknown} of them match no record in the database (stored: "
                           "they pair with their records' scores once those arrive)")
        if export_file is not None:
            n = _export(store, export_file, metric, raw_csv)
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


def _export(store: Any, path: Path, metric: str | None, raw_csv: bool = False) -> int:
    """Labels to ``path``; a CSV through :func:`tracescore.read.rows.write_csv` (formula
    cells neutralised unless ``raw_csv``; control characters escaped unless ``raw_csv``)."""
    from ..read.rows import write_csv
    from ..reports.textfmt import printable

    kind = _kind(path)
    rows = [{c: r[c] for c in COLUMNS} for r in store.labels(name=metric)]
    with _output(path) as f:
        if kind == "jsonl":  # JSON escapes control characters itself
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            if not raw_csv:
                rows = [{k: printable(v, keep="\n\t") if isinstance(v, str) else v
                         for k, v in r.items()} for r in rows]
            write_csv(iter(rows), f, COLUMNS, neutralise_formulas=not raw_csv)
    return len(rows)


def _read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line or row number, row) of an import file, read as it goes (never whole). A UTF-8
    byte order mark (Excel's "CSV UTF-8") is skipped."""
    kind = _kind(path)
    line = 0
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            if kind == "jsonl":
                for line, text in enumerate(f, 1):
                    if not text.strip():
                        continue
                    try:
                        obj = json.loads(text)
                    except ValueError as exc:
                        raise LabelProblem(f"{path} line {line}: not JSON ({exc})") from None
                    except RecursionError:
                        raise LabelProblem(f"{path} line {line}: not a label (JSON nested too "
                                           "deeply)") from None
                    if not isinstance(obj, dict):
                        raise LabelProblem(f"{path} line {line}: expected a JSON object")
                    yield line, obj
            else:
                reader = csv.DictReader(f)
                fields = set(reader.fieldnames or ())
                missing = {"name", "value"} - fields
                if not fields & {"trace_id", "record_id"}:
                    missing.add("trace_id")
                if missing:
                    raise LabelProblem(f"{path}: missing column(s) {', '.join(sorted(missing))}")
                for row in reader:
                    line = reader.line_num
                    # CSV has no null: an empty comment/annotator/time is none given
                    yield reader.line_num, {k: (None if v == "" and k != "value" else v)
                                            for k, v in row.items() if k is not None}
    except csv.Error as exc:  # a cell over csv.field_size_limit(), a NUL byte, ...
        raise LabelProblem(f"{path} line {line + 1}: not a CSV row of labels ({exc})") from None
    except OSError as exc:
        raise LabelProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LabelProblem(f"{path}: not UTF-8 text ({exc})") from None


def _target(row: dict[str, Any]) -> tuple[str, str | None]:
    """(trace id, record id or None) of an import row: ``record_id`` when given (its trace
    must agree with ``trace_id`` when both are), else ``trace_id`` (which may be a record id)."""
    from ..labels import label_target

    record = row.get("record_id")
    if record is None:
        return label_target(row.get("trace_id"))
    trace, record_id = label_target(record)
    if record_id is None:
        raise ValueError(f"record_id must be TRACE-SPAN, got {record!r:.80}")
    given = row.get("trace_id")
    if given is not None and str(given).lower() != trace:
        raise ValueError(f"record {record_id} is not in trace {given!r:.40}")
    return trace, record_id


def _unknown(store: Any, rows: list[dict[str, Any]]) -> int:
    """How many of ``rows`` name a trace (or a record) the database has no record of."""
    from ..read.labelling import unknown_targets
    from ..store.rollup import qmark

    return unknown_targets(store, qmark(store), rows)


#: Labels checked, then written, per step of an import (all steps in one transaction).
IMPORT_CHUNK = 2000


def _import(store: Any, path: Path, strict: bool = False) -> tuple[int, int]:
    """Check the rows of ``path`` and write them, :data:`IMPORT_CHUNK` at a time, all in one
    transaction: a bad row (or, ``strict``, a label that matches no record) rolls the whole
    import back. Memory holds one chunk, whatever the file's size. Returns (labels stored,
    how many of them match no record in the database)."""
    from ..labels import check_text, label_value

    scales: dict[str, Any] = {}
    chunk: list[dict[str, Any]] = []
    seen: set[int] = set()  # (trace, record, name, annotator) of the labels stored, hashed
    unknown = 0

    def write() -> None:
        nonlocal unknown
        fresh = {}
        for r in chunk:  # a label given twice is stored (and counted) once: the last wins
            key = hash((r["trace_id"], r["record_id"], r["name"], r["annotator"]))
            if key not in seen:
                fresh[key] = r
        unknown += _unknown(store, list(fresh.values()))
        seen.update(fresh)
        store.add_labels(chunk)
        chunk.clear()

    with store.transaction():
        for i, row in _read_rows(path):
            where = f"{path} line {i}"
            try:
                name = row.get("name")
                if not isinstance(name, str) or not name:
                    raise ValueError("needs a score name (column 'name')")
                if name not in scales:
                    scales[name] = _scale(store, name)
                value = row.get("value")  # label_value's one rule takes text as the API does
                created = row.get("created_at")
                created = None if created is None else float(created)
                if created is not None and not math.isfinite(created):
                    raise ValueError(f"created_at must be a finite number, got {created!r}")
                trace, record_id = _target(row)
                chunk.append({"trace_id": trace, "record_id": record_id,
                              "name": name, "value": label_value(value, scales[name]),
                              "annotator": check_text(row.get("annotator"), "annotator") or "",
                              "comment": check_text(row.get("comment"), "comment"),
                              "created_at": created, "source": "import"})
            except LabelProblem as exc:
                raise LabelProblem(f"{where}: {exc.message}") from None
            except (TypeError, ValueError) as exc:
                raise LabelProblem(f"{where}: {_short(exc)}") from None
            except (OverflowError, RecursionError):  # a 400-digit number; a nested value
                raise LabelProblem(f"{where}: a value is not a number a label can hold"
                                   ) from None
            if len(chunk) >= IMPORT_CHUNK:
                write()
        if chunk:
            write()
        if strict and unknown:
            raise LabelProblem(f"{path}: {unknown} of {len(seen)} labels match no record in "
                               "the database (--strict); nothing imported")
    return len(seen), unknown


def _short(exc: BaseException) -> str:
    """An error's text, cut (a message may quote a huge value)."""
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "…"


# -- the queue ----------------------------------------------------------------------------------
def _queue(store: Any, metric: str, annotator: str, plan_n: int | None, plan_id: str | None,
           seed: int | None) -> None:
    from ..read import labelling as RL
    from ..store.rollup import qmark

    scale = _scale(store, metric)
    conn = qmark(store)
    source = "manual"
    items: list[tuple[str | None, str]]
    if plan_n is not None or plan_id is not None:
        if plan_id is None:
            plan_id = _make_plan(store, metric, int(plan_n or 0), seed)
        rows = store.label_plan(plan_id)
        if not rows:
            raise LabelProblem(f"no plan {plan_id!r} in {_name(store.path)}")
        source = f"plan:{plan_id}"
        done = {r["record_id"] for r in store.labels(name=metric)
                if r["annotator"] == annotator and r["record_id"] is not None}
        items = []
        for r in rows:
            record_id = r.get("record_id")
            if record_id is None:
                record_id = RL.record_of_trace(store, conn, metric, r["trace_id"])
            if r["name"] != metric or (record_id is not None and record_id in done):
                continue
            items.append((record_id, r["trace_id"]))
    else:
        items = RL.unlabelled(conn, metric, annotator)
    if not items:
        click.echo(f"nothing to label for {metric!r}"
                   + (f" by {annotator!r}" if annotator else "") + ".")
        return
    _walk(store, scale, items, annotator, source)


def _make_plan(store: Any, metric: str, n: int, seed: int | None) -> str:
    """A plan of ``n`` records for ``metric`` (:func:`tracescore.trust.plan.make_plan`:
    stratified over the judge's score band × release), stored in ``label_plan``; its id.
    The population: every record with text to label and an ok score of that name (its
    newest); records without text are left out and counted."""
    import secrets

    from ..read.labelling import plan_population
    from ..store.rollup import qmark
    from ..trust.plan import Candidate, make_plan

    population: dict[str, Candidate] = {}
    textless: set[str] = set()
    for record_id, t, v, release, has_text in plan_population(qmark(store), metric):
        if not has_text:
            textless.add(record_id)
            continue
        if record_id not in population:  # a record scored twice: its newest score
            population[record_id] = Candidate(
                t, float(v), None if release is None else f"release={release}", record_id)
    seed = secrets.randbelow(2**31) if seed is None else seed
    left_out = (f"; {_n(len(textless), 'record')} without text to label left out"
                if textless else "")
    try:
        plan = make_plan(population.values(), n, seed=seed)
    except ValueError as exc:
        raise LabelProblem(f"cannot plan {n} labels of {metric!r} from {len(population)} "
                           f"scored records with text{left_out}: {exc}") from None
    plan_id = f"{metric}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    store.add_label_plan(plan_id, plan.table_rows(plan_id, metric, time.time()))
    click.echo(f"plan {plan_id}: {_n(len(plan.rows), 'record')} to label for {metric!r}, "
               f"drawn from {plan.population} in {len(plan.strata)} "
               f"strat{'um' if len(plan.strata) == 1 else 'a'}{left_out} "
               f"(seed {seed}; continue it later with --plan-id {plan_id})")
    for note in plan.notes:
        click.echo(f"  note: {note}")
    return plan_id


def _clipped(text: str, limit: int = CONTEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there are."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def _text_lines(rec: Any) -> list[str]:
    """What the annotator reads: query, contexts, answer — or why there is nothing. Each is
    clipped to :data:`CONTEXT_CHARS` characters so that a huge context cannot push the query
    off the screen."""
    from ..reports.textfmt import wrap

    if rec is None:
        return ["  (record not in the database: pruned or never stored)"]
    if not rec.content_captured:
        return ["  no text to label (capture_content=False)"]
    if rec.compact:
        return ["  no text to label (stored compact: not sampled, text not kept)"]
    if not rec.query and not rec.answer and not rec.contexts:
        return ["  no text to label (redacted)"]
    out = ["Query:", *wrap(_clipped(rec.query or "(none)"), WIDTH, "  ")]
    out.append(f"Contexts ({len(rec.contexts)}):")
    for i, c in enumerate(rec.contexts, 1):
        out.extend(wrap(f"[{i}] {_clipped(c.text)}", WIDTH, "  "))
    out += ["Answer:", *wrap(_clipped(rec.answer or "(none)"), WIDTH, "  ")]
    return out


def _has_text(rec: Any) -> bool:
    return (rec is not None and rec.content_captured and not rec.compact
            and bool(rec.query or rec.answer or rec.contexts))


def _walk(store: Any, scale: Any, items: list[tuple[str | None, str]], annotator: str,
          source: str) -> None:
    """The interactive loop over ``items`` ((record id, trace id), in order; one per record).
    Each label is stored on its record at once; the count printed is the records labelled."""
    from ..labels import label_value
    from ..reports.textfmt import clip

    given: dict[int, float] = {}
    i = 0
    keys = "y/n" if scale.binary else scale.describe()
    while 0 <= i < len(items):
        record_id, trace_id = items[i]
        rec = store.load_records([record_id]).get(record_id) if record_id else None
        click.echo("")
        click.echo(f"── {i + 1}/{len(items)} ── record {record_id or trace_id} ── label "
                   f"{scale.name!r} ({'yes/no' if scale.binary else 'number'})")
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
            value = label_value(answer, scale)
        except (TypeError, ValueError):
            click.echo(f"not a label: {clip(answer, 40)} — answer {keys}, or s/b/q")
            continue
        store.add_label(trace_id, scale.name, value, annotator=annotator or None,
                        source=source, created_at=time.time(), record_id=record_id)
        given[i] = value
        click.echo(f"saved: {scale.name} = {_shown(value, scale)}")
        i += 1
    click.echo(f"{_n(len(given), 'label')} saved" + (f" by {annotator}" if annotator else "")
               + ".")


def _shown(value: float, scale: Any) -> str:
    if scale.binary:
        return "yes" if value else "no"
    return f"{value:g}"
