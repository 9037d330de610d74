"""``DIR/index.html``: the comparison table, four charts and the machine, in one file.

Everything is inline (SVG drawn by ``loadtest.svg``, CSS in a style tag), so the report
opens from the file system, offline, and can be attached to an issue as it is. The raw
Locust CSVs, logs and arrival logs sit beside it in ``raw/``, and ``summary.json`` holds
every figure.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import svg
from .compare import (
    BASELINE,
    FAIL,
    NOTHING_SOLD,
    OK,
    StrategyResult,
    format_rounds,
    table_notes,
    table_rows,
)

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:3px 8px}
td{text-align:right}td:first-child{text-align:left}.FAIL,.ERROR{background:#f8d0d0}
.ok{background:#d8f0d8}.taught{background:#fde9c8}.baseline{background:#eef0f3}
svg{margin:1em 0;display:block}.wide{overflow-x:auto}
code{background:#f4f4f4;padding:2px 4px}"""


def _table(results: list[StrategyResult]) -> str:
    header, rows = table_rows(results)
    # on a phone the wide table scrolls in its own box, not the whole page sideways
    out = ["<div class='wide'><table><tr>"
           + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>"]
    for result, row in zip(results, rows, strict=True):
        # a no-op baseline sells nothing and is judged on nothing: neither green nor the
        # orange of an unsafe strategy's taught failure, which it was given (a showdown audit)
        css = {OK: "ok", FAIL: "FAIL", NOTHING_SOLD: "FAIL", BASELINE: "baseline"}.get(
            result.verdict, "ERROR" if result.error else "taught")
        out.append(f'<tr class="{css}">' + "".join(f"<td>{escape(c)}</td>" for c in row)
                   + "</tr>")
    return "\n".join(out + ["</table></div>"])


def _notes(results: list[StrategyResult]) -> list[str]:
    """What the terminal says under its table, said under this one: a sale cut short,
    orders no buyer heard of, and why a phase broke. Without them the page showed a
    green "ok" row, and a bare "ERROR" (a report audit)."""
    lines = table_notes(results) + [f"{r.label}: ERROR: {r.error}" for r in results
                                    if r.error]
    return [f'<p class="note">{escape(line)}</p>' for line in lines]


def charts(results: list[StrategyResult]) -> list[str]:
    """The SVG charts for ``results`` (flash: oversold, latency, throughput, fairness)."""
    ran = [r for r in results if not r.error]
    labels = [r.label for r in ran]
    latency = svg.bars("Purchase latency percentiles", labels,
                       {"p50": [r.p50 for r in ran], "p95": [r.p95 for r in ran],
                        "p99": [r.p99 for r in ran]}, unit="ms")
    over_time = svg.lines("Throughput over time (all requests)",
                          {r.label: r.throughput for r in ran}, unit="requests/s")
    if any(r.mode != "flash" for r in ran):
        rates = [r.rate for r in ran]
        title = "Purchases/s (baselines: no-op POST answers/s, bare GET req/s)"
        return [svg.bars(title, labels, {"per second": rates}, unit="per second"),
                latency, over_time]
    colors = ["#e15759" if r.oversold else "#59a14f" for r in ran]
    return [svg.bars("Units oversold", labels, {"oversold": [float(r.oversold) for r in ran]},
                     unit="units", colors=colors),
            latency, over_time,
            svg.bars("Fairness: share of the first buyers (one per unit) who got one",
                     labels, {"fairness": [r.fairness for r in ran]}, unit="share",
                     top=1.0)]


def _written_by(parts: tuple[str, ...], labels: set[str]) -> bool:
    """Whether the raw file at ``parts`` (its path under ``raw/``) is one of these
    phases': ``<label>_stats.csv``, ``<label>_arrivals.jsonl``, ``<label>.log``, or
    anything in a folder ``<label>/``."""
    first = parts[0]
    return any(first == f"{label}.log" or first.startswith(f"{label}_")
               or (len(parts) > 1 and first == label) for label in labels)


def _raw_links(raw_files: list[str]) -> str:
    """One link per raw file (a browser lists a ``file://`` folder, a web server may not)."""
    if not raw_files:
        return ""
    # a round's files are named "atomic #2_stats.csv": unquoted, "#" began a fragment
    items = "".join(f"<li><a href='{escape(quote(name), quote=True)}'>{escape(name)}</a></li>"
                    for name in raw_files)
    return f"<details><summary>{len(raw_files)} raw files</summary><ul>{items}</ul></details>"


def _explained(results: list[StrategyResult]) -> str:
    """What the table's columns mean: a flash sale's, or a sustained run's."""
    verdicts = ("<p>A strategy marked safe that oversold, lost an order or left the sale "
                "inconsistent is a FAIL; unsafe ones may break (the lesson), and some need "
                "a crash, a pause or a clock to (the labs). ")
    if any(r.mode != "flash" for r in results):
        return (verdicts + "<em>purchases/s</em> and <em>req/s</em> are counted over the "
                "phase's steady window (its first seconds of ramp and its last second "
                "left out); <em>% POST no-op</em> is purchases/s as a share of the no-op "
                "baselines run beside it, the purchase's own client code against an "
                "endpoint that does nothing; <em>% GET no-op</em> the same against the "
                "old bare GET. <em>redis/purchase</em> counts every Redis command of the "
                "run per purchase attempt, a busy answer's included.</p>")
    return (verdicts + "<em>sell-out s</em> is from the first purchase attempt to the "
            "answer that sold the last unit; a dash means the buyers' answers did not "
            "account for every unit: fewer buyers than units, or a phase that ended first "
            "(locks timing out under the spike answer <code>503 busy</code>). "
            "<em>fairness</em> is the share of the first buyers to arrive, one per unit, "
            "who got one (a buyer still waiting at the phase's cap counts if the audit "
            "found the order the shop made after it). <em>redis/purchase</em> counts "
            "every Redis command of the run (browsing included) per purchase "
            "attempt.</p>")


def _fact(key: str, value: Any) -> str:
    """A setting as read: a list of names comma-separated, the notes (sentences) a
    list. Python's repr showed "strategies: ['naive', 'token', 'atomic']" and "notes:
    ["zookeeper skipped: ..."]" (a showdown audit)."""
    if not isinstance(value, list):
        return escape(str(value))
    if key == "notes":
        return "<ul>" + "".join(f"<li>{escape(str(item))}</li>" for item in value) + "</ul>"
    return escape(", ".join(str(item) for item in value))


def render(results: list[StrategyResult], summary: dict[str, Any],
           raw_files: list[str] | None = None) -> str:
    machine = summary.get("machine", {})
    settings = summary.get("settings", {})
    # what the run's mode uses: a flash sale listed a "duration: 10" it never had (it
    # ends with its stock, at cap_s), a sustained run the flash sale's cap, and both an
    # empty "notes: []" (a docs audit); summary.json keeps every field
    unused = {"duration"} if settings.get("mode", "flash") == "flash" else {"cap_s"}
    facts = "".join(f"<li>{escape(str(k))}: {_fact(k, v)}</li>"
                    for k, v in {**machine, **settings}.items()
                    if k != "command" and k not in unused and v not in ([], "", None))
    return "\n".join([
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>seckill showdown</title>", f"<style>{_STYLE}</style></head><body>",
        "<h1>seckill showdown</h1>",
        f"<p>Command: <code>{escape(str(machine.get('command', '')))}</code> "
        f"({summary.get('elapsed_s', '?')} s)</p>",
        # a run cut short by Ctrl-C: the phases that finished, said so above the table
        *([f"<p class='note'><strong>Showdown {escape(summary['interrupted'])}.</strong>"
           "</p>"] if summary.get("interrupted") else []),
        _table(results),
        *(f"<p>{escape(line)}</p>" for line in format_rounds(results).splitlines()),
        *_notes(results),
        _explained(results),
        # a chart keeps its size (its 11 px labels shrunk to 5 px on a phone) and scrolls
        *(f"<div class='wide'>{chart}</div>" for chart in charts(results)),
        f"<h2>Machine and settings</h2><ul>{facts}</ul>",
        "<p>Raw data: <a href='summary.json'>summary.json</a>, Locust CSVs, logs and "
        "arrival logs (and the log of a shop the showdown served) in "
        "<a href='raw/'>raw/</a>.</p>",
        _raw_links(raw_files or []),
        "</body></html>"])


def write_report(directory: Path, results: list[StrategyResult],
                 summary: dict[str, Any], also: Iterable[str] = ()) -> Path:
    """``index.html`` in ``directory``, linking the files of ``raw/`` that this run's
    phases wrote (each file is named after its phase's label), and those named in
    ``also`` (the served shop's log: a file of the run, not of a phase). An earlier
    run into the same directory left its own there: they stay, unlinked (nothing is
    deleted)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.html"
    raw = directory / "raw"
    labels, extra = {result.label for result in results}, set(also)
    raw_files = sorted(f.relative_to(directory).as_posix() for f in raw.rglob("*")
                       if f.is_file() and (f.relative_to(raw).as_posix() in extra
                                           or _written_by(f.relative_to(raw).parts, labels))
                       ) if raw.is_dir() else []
    path.write_text(render(results, summary, raw_files), encoding="utf-8")
    return path
