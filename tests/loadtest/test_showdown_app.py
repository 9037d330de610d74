"""The showdown against the real shop: gunicorn, embedded Redis, SQLite, Locust spikes.

The reduced run is what CI affords (about a minute): it must show the naive and the
local lock overselling, because that is the lesson, and every safe path selling exactly
the stock, because that is the promise. The full-size run is ``make demo``'s and is marked slow.
"""

from __future__ import annotations

import json

import pytest

from tests.support import make_recipe
from webapp.cli import main

SAFE_IN_CI = ["token", "fair", "atomic"]


def run_showdown(tmp_path, *args):
    code = main(["showdown", "--report", str(tmp_path), *args])
    summary = json.loads((tmp_path / "summary.json").read_text())
    return code, {r["strategy"]: r for r in summary["results"]}


@pytest.mark.timeout(300)
def test_a_reduced_showdown_shows_the_unsafe_locks_overselling_and_safe_ones_exact(tmp_path):
    code, results = run_showdown(tmp_path, "--users", "300", "--stock", "50",
                                 "--strategies", ",".join(["naive", "local", *SAFE_IN_CI]))
    # both lessons: naive's check-then-set and local's lock per gunicorn worker (it ran
    # here unchecked: a showdown serving one worker sold it exactly, "ok", and passed)
    for name in ("naive", "local"):
        assert results[name]["oversold"] > 0, results[name]
        assert results[name]["verdict"] == "unsafe, as taught", results[name]
    for name in SAFE_IN_CI:
        r = results[name]
        assert r["error"] is None, r["error"]
        assert (r["sold"], r["oversold"], r["lost"], r["duplicates"]) == (50, 0, 0, 0), r
        assert r["consistent"] and r["outcomes"].get("order") == 50, r
        assert r["outcomes"].get("error", 0) == 0, r["outcomes"]
    assert code == 0
    assert "<svg" in (tmp_path / "index.html").read_text()


@pytest.mark.timeout(180)
def test_the_served_shops_log_is_kept_in_the_reports_raw_folder_and_linked(tmp_path,
                                                                          monkeypatch):
    """The README promised the shop's log in ``DIR/raw/``; it was gunicorn's file in the
    scratch folder, deleted with it (a showdown audit)."""
    monkeypatch.setenv("SECKILL_LOG_LEVEL", "info")  # warning, the default: a clean run
    code, _ = run_showdown(tmp_path, "--users", "5", "--stock", "2", "--strategies", "atomic")
    log = tmp_path / "raw" / "shop.log"
    assert code == 0 and log.is_file()
    assert "Booting worker" in log.read_text(errors="replace")  # gunicorn's own lines
    assert "href='raw/shop.log'" in (tmp_path / "index.html").read_text()


@pytest.mark.timeout(180)
def test_make_demos_command_serves_the_shop_and_writes_its_report(tmp_path, monkeypatch):
    """``make demo`` runs ``--report reports/demo``: gunicorn, started in its scratch
    folder, took the log path from there, could not open it and never came up ("gunicorn
    did not become healthy: FileNotFoundError: ... 'reports/demo/raw/shop.log'", exit
    1; a CLI audit). Every test gave an absolute path, so this one runs the Makefile's
    own recipe, only smaller."""
    recipe = make_recipe("demo")
    assert recipe[:2] == [".venv/bin/seckill", "showdown"], recipe
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SECKILL_LOG_LEVEL", "info")  # gunicorn's lines: the log is its
    code = main([*recipe[1:], "--users", "3", "--stock", "2", "--strategies", "atomic"])
    report = tmp_path / recipe[recipe.index("--report") + 1]
    assert code == 0 and (report / "index.html").is_file()
    assert "Booting worker" in (report / "raw" / "shop.log").read_text(errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_full_showdown_of_every_strategy_has_no_safe_strategy_failing(tmp_path):
    code, results = run_showdown(tmp_path)
    assert {"naive", "token", "redlock", "atomic", "sql"} <= set(results)
    assert results["naive"]["oversold"] > 0
    failing = {name: r["verdict"] for name, r in results.items() if r["verdict"] in
               ("FAIL", "ERROR")}
    assert failing == {} and code == 0


@pytest.mark.timeout(300)
def test_sustained_mode_measures_purchases_per_second_beside_a_no_op_baseline(tmp_path,
                                                                               capsys):
    code = main(["showdown", "--report", str(tmp_path), "--sustained", "--duration", "4",
                 "--users", "50", "--strategies", "atomic", "--rounds", "2"])
    phases = json.loads((tmp_path / "summary.json").read_text())["results"]
    assert code == 0
    assert [(r["strategy"], r["mode"], r["round_no"]) for r in phases] == [
        ("no-op baseline", "noop", 0),  # POSTed like a purchase
        ("no-op GET (old)", "noop-get", 0),  # the old bare GET, still shown
        ("atomic", "sustained", 1),
        ("no-op baseline (round 1)", "noop", 1),  # between the rounds: drift shows
        ("atomic", "sustained", 2),
        ("no-op baseline (end)", "noop", 2)]
    assert all(r["purchases_per_s"] > 0 for r in phases if r["mode"] == "noop")
    assert phases[1]["rps"] > 0
    for atomic in (phases[2], phases[4]):
        assert atomic["purchases_per_s"] > 0 and atomic["consistent"], atomic
    out = capsys.readouterr().out
    assert "atomic #2" in out and "atomic: median" in out and "over 2 rounds" in out
    assert (tmp_path / "raw" / "atomic #2_arrivals.jsonl").exists()
    # Locust's stats as it quit, not its --csv file, which lags up to a second: every
    # purchase it counted is a line of the arrival log (a 4 s phase's CSV counted 4,200
    # of 5,434; a showdown audit)
    from loadtest import locust_csv

    for label, name in [("atomic #2", "/api/products/[sku]/purchase"),
                        ("no-op baseline", "/api/noop")]:
        counted = locust_csv.read_stats(tmp_path / "raw" / label)[name].requests
        log = (tmp_path / "raw" / f"{label}_arrivals.jsonl").read_text().splitlines()
        # and the attempts still in flight as the run stopped, which Locust never
        # counted, are lines of their own ("cut_off")
        lines = [line for line in log if json.loads(line)["outcome"] != "cut_off"]
        assert counted == len(lines), (label, counted, len(lines))


def test_rounds_are_refused_without_sustained(tmp_path, capsys):
    assert main(["showdown", "--report", str(tmp_path), "--rounds", "2"]) == 2
    assert "--rounds is for --sustained" in capsys.readouterr().err
