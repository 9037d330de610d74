"""Reading Locust's CSVs, the comparison table, the verdicts and the HTML report."""

from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from loadtest import locust_csv, svg
from loadtest.compare import (
    FAIL,
    OK,
    TAUGHT,
    StrategyResult,
    baseline_rates,
    failed,
    format_rounds,
    format_table,
    table_rows,
)
from loadtest.report import charts, render, write_report
from loadtest.verdict import PURCHASE_NAME

FIXTURES = Path(__file__).parent / "fixtures"


def test_locust_stats_are_read_per_request_name_with_percentiles_in_ms():
    stats = locust_csv.read_stats(FIXTURES / "flash")
    purchase = stats[PURCHASE_NAME]
    assert (purchase.requests, purchase.failures) == (50, 2)
    assert (purchase.p50, purchase.p95, purchase.p99) == (26, 28, 29)
    assert stats[locust_csv.AGGREGATED].requests == 100


def test_missing_csvs_read_as_nothing(tmp_path):
    assert locust_csv.read_stats(tmp_path / "none") == {}
    assert locust_csv.read_history(tmp_path / "none") == []


def test_throughput_over_time_comes_from_the_cumulative_counts():
    points = locust_csv.read_history(FIXTURES / "flash")
    assert points[0].total_requests == 0 and points[-1].total_requests == 100
    series = locust_csv.throughput(points)
    assert sum(rate * 1 for _, rate in series) == pytest.approx(100)
    assert [t for t, _ in series] == sorted(t for t, _ in series)


def result(name, safe, **figures):
    base = dict(sold=100, consistent=True, rps=500.0, p50=10.0, p95=40.0, p99=80.0,
                fairness=0.9, sell_out_s=1.5, throughput=[(1.0, 400.0), (2.0, 100.0)])
    return StrategyResult(name, safe, users=1000, stock=100, **{**base, **figures})


def test_verdicts_separate_taught_failures_from_real_ones():
    naive = result("naive", False, sold=130, oversold=30, consistent=False)
    token = result("token", True)
    broken = result("fair", True, lost=1, consistent=False)
    crashed = StrategyResult("redlock", True, error="Locust made no requests")
    assert [r.verdict for r in (naive, token, broken)] == [TAUGHT, OK, FAIL]
    assert failed([naive, token, broken, crashed]) == [broken, crashed]


def test_the_table_has_one_aligned_line_per_strategy():
    text = format_table([result("naive", False, oversold=30, consistent=False),
                         result("setnx-expire", True, fairness=None)])
    header, rule, *rows = text.splitlines()
    assert header.split()[:4] == ["strategy", "safe", "sold", "oversold"]
    assert len({len(line) for line in (header, rule, *rows)}) == 1
    assert rows[0].split()[:4] == ["naive", "NO", "100", "30"]
    assert " - " in rows[1]  # an unknown figure is a dash, not 0


def test_each_flash_figure_sits_under_its_own_column():
    # catches cells out of step with the header (fairness and sell-out s swapped): the
    # row is read by column name, with figures that differ in every column
    header, rows = table_rows([result("token", True, sell_out_s=3.256, fairness=0.8,
                                      redis_per_purchase=4.56, rps=512.4, p99=81.6)])
    cells = dict(zip(header, rows[0], strict=True))
    assert cells["fairness"] == "0.80"
    assert cells["sell-out s"] == "3.26"
    assert cells["redis/purchase"] == "4.6"
    assert (cells["req/s"], cells["p99 ms"], cells["verdict"]) == ("512", "82", OK)


def test_a_strategy_without_a_figure_is_n_a_in_its_chart_not_a_bare_gap():
    # a strategy with no fairness figure left a gap in the fairness chart, read as zero
    fairness = charts([result("token", True), result("setnx-expire", True, fairness=None)])[-1]
    assert "Fairness" in fairness
    assert ">n/a<title>setnx-expire fairness: no figure</title>" in fairness
    assert fairness.count("n/a") == 1  # token has its figure


def test_the_report_is_one_offline_html_file_with_the_table_and_four_charts(tmp_path):
    results = [result("naive", False, oversold=30, consistent=False), result("token", True)]
    summary = {"machine": {"cpu": "Test CPU", "command": "seckill showdown --users 9"},
               "settings": {"users": 1000}, "elapsed_s": 12.0}
    path = write_report(tmp_path, results, summary)
    html = path.read_text()
    assert html.count("<svg") == 4
    assert "seckill showdown --users 9" in html and "Test CPU" in html
    assert "<td>naive</td>" in html and "unsafe, as taught" in html
    urls = set(re.findall(r"(?:src|href)=['\"]([^'\"]+)", html))
    assert urls <= {"summary.json", "raw/"}  # nothing fetched from the network


def test_the_report_links_every_raw_file_of_its_phases_and_no_other(tmp_path):
    (tmp_path / "raw" / "token").mkdir(parents=True)
    ours = ("token/locust_stats.csv", "token/locust.log", "token_stats.csv",
            "token_arrivals.jsonl", "token.log")
    theirs = ("naive_stats.csv", "naive.log", "token #2_stats.csv", "tokenx.log")
    for name in ours + theirs:  # theirs: an earlier run's, into the same directory
        (tmp_path / "raw" / name).write_text("x")
    html = write_report(tmp_path, [result("token", True)], {}).read_text()
    urls = set(re.findall(r"href='([^']+)'", html))
    assert {f"raw/{name}" for name in ours} <= urls
    assert not {f"raw/{name}" for name in theirs} & urls
    assert all((tmp_path / url).exists() for url in urls - {"raw/", "summary.json"})


def test_a_rounds_raw_files_are_linked_by_urls_a_browser_resolves(tmp_path):
    # "token #2_stats.csv" linked unquoted: the browser read "#2_stats.csv" as a fragment
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "token #2_stats.csv").write_text("x")
    second = result("token", True, mode="sustained", round_no=2)
    html = write_report(tmp_path, [second], {}).read_text()
    urls = set(re.findall(r"href='([^']+)'", html)) - {"raw/", "summary.json"}
    assert urls == {"raw/token%20%232_stats.csv"}
    assert all((tmp_path / unquote(url)).exists() for url in urls)


def test_sustained_results_chart_purchases_per_second_against_the_baseline():
    baseline = StrategyResult("no-op baseline", True, mode="noop", rps=900.0)
    atomic = result("atomic", True, mode="sustained", purchases_per_s=300.0)
    assert failed([baseline, atomic]) == []  # a baseline has no sale to be wrong about
    html = render([baseline, atomic], {})
    assert "Purchases/s" in html and "baseline" in html


def test_sustained_rows_give_each_rate_as_a_share_of_both_no_op_baselines():
    post = StrategyResult("no-op baseline", True, mode="noop", rps=1000.0,
                          purchases_per_s=800.0)
    get = StrategyResult("no-op GET (old)", True, mode="noop-get", rps=3200.0)
    atomic = result("atomic", True, mode="sustained", purchases_per_s=400.0)
    header, rule, *rows = format_table([post, get, atomic]).splitlines()
    cells = [re.split(r"\s{2,}", row.strip()) for row in rows]
    columns = re.split(r"\s{2,}", header.strip())
    post_at, get_at = columns.index("% POST no-op"), columns.index("% GET no-op")
    # the POST baseline's good answers/s, not its req/s, is the denominator
    assert [row[post_at] for row in cells] == ["100%", "400%", "50%"]
    assert [row[get_at] for row in cells] == ["25%", "100%", "12%"]


def test_the_post_baseline_run_first_and_last_divides_by_its_mean():
    first = StrategyResult("no-op baseline", True, mode="noop", rps=900.0,
                           purchases_per_s=900.0)
    last = StrategyResult("no-op baseline (end)", True, mode="noop", rps=1100.0,
                          purchases_per_s=1100.0)
    atomic = result("atomic", True, mode="sustained", purchases_per_s=800.0)
    assert baseline_rates([first, atomic, last]) == (1000.0, None)
    header, rule, *rows = format_table([first, atomic, last]).splitlines()
    post_at = re.split(r"\s{2,}", header.strip()).index("% POST no-op")
    assert [re.split(r"\s{2,}", row.strip())[post_at] for row in rows] == ["90%", "80%", "110%"]


def test_each_round_is_a_share_of_the_baselines_either_side_of_it_and_the_median_is_given():
    def noop(name: str, rate: float, round_no: int) -> StrategyResult:
        return StrategyResult(name, True, mode="noop", rps=rate, purchases_per_s=rate,
                              round_no=round_no)

    def atomic(rate: float, round_no: int) -> StrategyResult:
        return result("atomic", True, mode="sustained", purchases_per_s=rate,
                      round_no=round_no)

    # the machine slows down after the first round: 1000/s, then 800/s
    run = [noop("no-op baseline", 1000.0, 0), atomic(855.0, 1),
           noop("no-op baseline (round 1)", 800.0, 1), atomic(720.0, 2),
           noop("no-op baseline (round 2)", 800.0, 2), atomic(680.0, 3),
           noop("no-op baseline (end)", 800.0, 3)]
    header, rule, *rows = format_table(run).splitlines()
    columns = re.split(r"\s{2,}", header.strip())
    cells = {row[0]: row for row in (re.split(r"\s{2,}", line.strip()) for line in rows)}
    post_at = columns.index("% POST no-op")
    # 855 / 900, 720 / 800, 680 / 800: not against the run's mean of 850
    assert [cells[name][post_at] for name in ("atomic", "atomic #2", "atomic #3")] == \
        ["95%", "90%", "85%"]
    assert format_rounds(run) == \
        "atomic: median 90% of the POST no-op over 3 rounds (95%, 90%, 85%)"


def test_without_rounds_there_is_no_round_summary():
    post = StrategyResult("no-op baseline", True, mode="noop", rps=900.0,
                          purchases_per_s=900.0)
    assert format_rounds([post, result("atomic", True, mode="sustained",
                                       purchases_per_s=800.0)]) == ""


def test_bar_heights_are_proportional_to_the_values():
    chart = svg.bars("t", ["a", "b"], {"v": [10.0, 5.0]})
    heights = [float(h) for h in re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" '
                                            r'height="([^"]+)"', chart)]
    assert heights[0] == pytest.approx(2 * heights[1], abs=0.2)  # rounded to 0.1 px


def test_a_bar_s_title_prints_its_value_whole_not_in_exponent_form():
    chart = svg.bars("t", ["setnx", "token"], {"p50": [10_000.0, 12.345]})
    titles = re.findall(r"<title>([^<]+)</title></rect>", chart)
    assert titles == ["setnx p50: 10,000", "token p50: 12.35"], titles


def test_a_paired_phase_is_a_share_of_the_baselines_right_beside_it():
    def noop(name: str, rate: float, error: str | None = None) -> StrategyResult:
        return StrategyResult(name, True, mode="noop", rps=rate, purchases_per_s=rate,
                              round_no=1, error=error)

    def sold(name: str, rate: float) -> StrategyResult:
        return result(name, True, mode="sustained", purchases_per_s=rate, round_no=1)

    # the machine slows down in the middle of the round: 1000/s, then 800/s
    run = [noop("no-op baseline", 1000.0), sold("token", 950.0),
           noop("no-op baseline (after token)", 1000.0), sold("fair", 810.0),
           noop("no-op baseline (after fair)", 800.0, error="locust broke"),
           sold("atomic", 720.0), noop("no-op baseline (end)", 800.0)]
    header, rule, *rows = format_table(run).splitlines()
    post_at = re.split(r"\s{2,}", header.strip()).index("% POST no-op")
    cells = {row[0]: row for row in (re.split(r"\s{2,}", line.strip()) for line in rows)}
    # 950 / 1000, not the round's (1000 + 800) / 2; a broken baseline is passed over
    # for the next good one on its side: 810 / 900 (1000 before, 800 after) and
    # 720 / 900 (1000 before, past the broken one, and 800 after)
    assert [cells[name][post_at] for name in ("token", "fair", "atomic")] == \
        ["95%", "90%", "80%"]


@pytest.mark.parametrize("mode", ["sustained", "noop"])
def test_a_sustained_phases_req_s_is_its_steady_window_like_its_purchases(tmp_path, mode):
    # a ramp of 3 slow seconds, then 1000 requests a second: Locust's whole-run average
    # is not the rate the purchases/s beside it is measured over
    from loadtest.phase import Plan, _read_locust

    header = (FIXTURES / "flash_stats_history.csv").read_text().splitlines()[0]
    counts = [0, 10, 20, 30, 1030, 2030, 3030, 4030, 5030, 6030]
    rows = [f"{1_800_000_000 + i},100,,Aggregated,0,0,1,1,1,1,1,1,1,1,1,1,1,{n},0,1,1,1,1,1"
            for i, n in enumerate(counts)]
    (tmp_path / "x_stats_history.csv").write_text("\n".join([header, *rows]) + "\n")
    # the totals of another run (its whole-run average: 1096 requests/s)
    (tmp_path / "x_stats.csv").write_text((FIXTURES / "flash_stats.csv").read_text())
    phase = result("token", True, mode=mode)
    _read_locust(phase, tmp_path / "x", Plan(mode=mode))
    assert phase.rps == pytest.approx(1000, rel=0.01)


def test_a_sustained_report_explains_its_own_columns_not_the_flash_sales():
    flash = render([result("token", True)], {})
    sustained = render([result("token", True, mode="sustained")], {})
    assert "sell-out s" in flash and "% POST no-op" not in flash
    assert "% POST no-op</em>" in sustained and "sell-out s" not in sustained


def test_a_sustained_report_says_redis_per_purchase_is_per_attempt_as_measured():
    """The measure divides by every purchase attempt; the sustained text said "per
    purchase" (a showdown audit)."""
    sustained = render([result("token", True, mode="sustained")], {})
    assert "every Redis command of the run per purchase attempt" in sustained


@pytest.mark.parametrize("largest, top", [(4800.0, 6000.0), (1.0, 1.0), (0.98, 1.0),
                                          (37.0, 40.0), (101.0, 120.0), (0.0, 1.0)])
def test_an_axis_is_four_round_steps_at_or_above_the_largest_value(largest, top):
    # the ticks were the largest value x 1.1 in quarters: 5,280 / 3,960 / 2,640 / 1,320
    assert svg._top([largest]) == pytest.approx(top)


#: where a line chart's x-axis labels sit
X_LABELS_Y = svg.H - svg.BOTTOM + 16


def test_a_line_chart_names_its_x_axis_steps_and_lays_long_names_out_without_overlap():
    names = [f"no-op baseline (after strategy-{i} #2)" for i in range(8)]
    chart = svg.lines("t", {name: [(0.0, 1.0), (61.0, 5.0)] for name in names})
    ticks = re.findall(rf'y="{X_LABELS_Y}" text-anchor="\w+" font-size="11">([^<]+)</text>',
                       chart)
    assert ticks == ["0", "20", "40", "60", "80 s"]
    legend = [(float(x), float(y)) for x, y in
              re.findall(r'<text x="([\d.]+)" y="([\d.]+)" font-size="11">no-op', chart)]
    assert len(legend) == len(names)
    height = float(re.search(r'<svg [^>]*height="(\d+)"', chart)[1])
    assert all(y <= height - 4 for _, y in legend)  # every row inside the picture
    for (x1, y1), (x2, y2) in zip(legend, legend[1:], strict=False):
        if y1 == y2:  # neighbours on one row are a whole name apart
            assert x2 - x1 >= len(names[0]) * 6.5


def test_a_line_charts_last_x_axis_label_fits_inside_the_picture():
    """Centred on the last tick, 10 px from the edge, "3.2 s" was cut to "3.2 :" (a
    showdown audit). A character is taken as 6.2 px wide at 11 px, as for the bars."""
    chart = svg.lines("t", {"token": [(0.0, 1.0), (3.1, 2.0)]})
    width = float(re.search(r'<svg [^>]*width="(\d+)"', chart)[1])
    labels = re.findall(rf'<text x="([\d.]+)" y="{X_LABELS_Y}" text-anchor="(\w+)" '
                        r'font-size="11">([^<]+)</text>', chart)
    assert labels[-1][2] == "3.2 s"
    for x, anchor, text in labels:
        right = float(x) + len(text) * 6.2 * {"start": 1, "middle": 0.5, "end": 0}[anchor]
        assert right <= width, (x, anchor, text)


def test_a_no_op_baselines_row_has_its_own_neutral_colour_not_a_taught_failures():
    """A sustained run's baselines were coloured like "unsafe, as taught" (a showdown
    audit)."""
    page = render([result("no-op baseline", True, mode="noop"),
                   result("naive", False, mode="sustained", oversold=1)], {})
    rows = re.findall(r'<tr class="(\w+)"><td>([^<]+)</td>', page)
    assert rows == [("baseline", "no-op baseline"), ("taught", "naive")]
    assert ".baseline{background:" in page


def test_a_flash_rows_colour_is_its_verdicts_a_safe_locks_failure_is_not_taught():
    # catches a safe lock's FAIL coloured orange like an unsafe one's expected oversell
    page = render([result("naive", False, oversold=30, consistent=False),
                   result("fair", True, lost=1, consistent=False),
                   result("token", True)], {})
    rows = re.findall(r'<tr class="(\w+)"><td>([^<]+)</td>', page)
    assert rows == [("taught", "naive"), ("FAIL", "fair"), ("ok", "token")]


def test_the_oversold_chart_colours_an_overselling_strategys_bar_bad_and_an_exact_one_good():
    # catches the oversold bars all one colour (always green): report.py draws an
    # oversell red (#e15759) and an exact sale green (#59a14f)
    oversold = charts([result("naive", False, oversold=30, consistent=False),
                       result("token", True)])[0]
    assert "Units oversold" in oversold
    bars = re.findall(r'fill="(#\w+)"><title>([^<]+) oversold:', oversold)
    assert bars == [("#e15759", "naive"), ("#59a14f", "token")]


def test_a_bar_charts_slanted_labels_fit_inside_the_picture():
    label = "no-op baseline (after atomic #3)"
    chart = svg.bars("t", [label, "token"], {"v": [1.0, 2.0]})
    height = float(re.search(r'<svg [^>]*height="(\d+)"', chart)[1])
    y = float(re.search(r'transform="rotate\(-35 [\d.]+ ([\d.]+)\)"', chart)[1])
    assert y + len(label) * 6.2 * math.sin(math.radians(35)) <= height
    assert f">{label}</text>" in chart  # whole, not cut


def test_the_page_says_under_its_table_what_the_terminal_noted_and_why_a_phase_broke():
    """A sale cut short by an outage, orders no buyer heard of, and a phase that broke
    were said under the terminal's table only: the page showed a green "ok" row and a
    bare "ERROR" with no reason (a report audit)."""
    cut_short = result("token", True, sold=4, outcomes={"busy": 6})
    cut_short.stock = cut_short.users = 10
    unheard = result("atomic", True, unconfirmed=3, outcomes={"error": 3})
    broke = StrategyResult("redlock", True, error="Locust made no requests")
    page = render([cut_short, unheard, broke], {})
    assert "note: token left 6 of 10 units unsold while 6 answers were 503 busy" in page
    assert "3 orders were made that no buyer was told about" in page
    assert "redlock: ERROR: Locust made no requests" in page


def test_the_page_fits_a_phones_width_the_table_and_each_chart_scroll_in_their_box():
    """At 375 px the 720 px charts and the 14-column table ran off the page's right
    edge, beside paragraphs wrapped to the screen (a report audit)."""
    page = render([result("token", True)], {})
    assert "<meta name='viewport' content='width=device-width, initial-scale=1'>" in page
    assert page.count("<div class='wide'><svg") == 4
    assert re.search(r"<div class='wide'><table>.*</table></div>", page, re.S)
    assert ".wide{overflow-x:auto}" in page


def test_the_page_says_it_is_in_english_as_the_shops_pages_do():
    """The report's <html> named no language (the storefront's and the admin page's say
    lang="en"): a screen reader set to another language, a Chinese one for this
    workshop's readers say, reads the English page with that language's voice and
    rules (WCAG 3.1.1; a report audit)."""
    page = render([result("token", True)], {})
    assert page.startswith("<!doctype html><html lang='en'><head>")


def test_the_settings_list_leaves_out_what_the_runs_mode_does_not_use():
    from loadtest.phase import Plan

    machine = {"cpu": "EPYC", "notes": [], "command": "seckill showdown"}
    flash = render([result("token", True)],
                   {"machine": machine, "settings": {**Plan().__dict__, "strategies": ["token"]}})
    assert "<li>cap_s: 35</li>" in flash and "<li>cpu: EPYC</li>" in flash
    assert "duration" not in flash and "notes" not in flash  # a flash sale has no duration
    sustained = render([result("token", True, mode="sustained")],
                       {"machine": {**machine, "notes": ["no ZooKeeper"]},
                        "settings": Plan(mode="sustained", duration=60).__dict__})
    assert "<li>duration: 60</li>" in sustained and "cap_s" not in sustained
    assert "<li>notes: <ul><li>no ZooKeeper</li></ul></li>" in sustained


def test_a_run_whose_purchases_all_outlast_it_says_so_not_that_locust_made_none(tmp_path):
    """A sustained run of 2 s with 3 s sections: "Locust made no requests", though one
    purchase was sent and still waiting when the run ended (a showdown audit)."""
    from loadtest.phase import PhaseBroken, Plan, _read_locust

    header = (FIXTURES / "flash_stats.csv").read_text().splitlines()[0]
    (tmp_path / "x_stats.csv").write_text(
        header + "\n" + ",Aggregated" + ",0" * (header.count(",") - 1) + "\n")
    plan = Plan(mode="sustained", duration=2, work_ms=3000)
    with pytest.raises(PhaseBroken, match=r"^no request finished within the run: 1 still "
                       r"in flight \(work_ms 3000 >= the run's 2 s\)"):
        _read_locust(result("token", True, mode="sustained"), tmp_path / "x", plan, 1)


def test_a_throughput_series_of_one_point_is_drawn_as_a_marker():
    """A one-point polyline draws nothing: a phase with one second of history was in
    the legend and nowhere on the chart (a showdown audit)."""
    chart = svg.lines("t", {"token": [(1.0, 50.0)], "atomic": [(0.0, 1.0), (3.0, 2.0)]})
    (marker,) = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="4" fill="([^"]+)">'
                           r'<title>token</title>', chart)
    assert marker[2] == svg.PALETTE[0] and chart.count("<polyline") == 1


def test_the_settings_list_names_comma_separated_and_notes_as_a_list():
    """They showed as Python: "strategies: ['naive', 'token', 'atomic']" and "notes:
    ["zookeeper skipped: ..."]" (a showdown audit)."""
    page = render([result("token", True)],
                  {"settings": {"strategies": ["naive", "token", "atomic"]},
                   "machine": {"notes": ["zookeeper skipped: no ZOOKEEPER_HOSTS"]}})
    assert "<li>strategies: naive, token, atomic</li>" in page
    assert "<li>notes: <ul><li>zookeeper skipped: no ZOOKEEPER_HOSTS</li></ul></li>" in page
    assert "[" not in page.split("Machine and settings")[1]


def test_the_fairness_chart_is_drawn_on_a_share_axis_from_0_to_1():
    """Fitted to its bars, a fairness of 0.6 reached the top of the chart: a glance read
    it as perfect (a showdown audit)."""
    chart = charts([result("token", True, fairness=0.6)])[-1]
    assert "Fairness" in chart
    ticks = re.findall(r'text-anchor="end" font-size="11">([\d.]+)</text>', chart)
    assert ticks[-1] == "1", ticks
