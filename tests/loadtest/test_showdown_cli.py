"""``seckill showdown`` as a command: arguments, exit code and files, on a stub shop.

``--url`` points the showdown at a running shop, here the stub from ``stubshop.py``, so
the exit-code rule (non-zero only when a strategy marked safe went wrong) is tested
without the web app; ``test_showdown_app.py`` runs the real thing.
"""

from __future__ import annotations

import argparse
import json

import pytest

from loadtest.shop import ShopClient, ShopError
from tests.loadtest.stubshop import StubShop, serve
from webapp.cli import build_parser, main

pytestmark = pytest.mark.timeout(180)


def showdown(url, tmp_path, strategies):
    return main(["showdown", "--url", url, "--admin-token", "t", "--users", "30",
                 "--stock", "10", "--strategies", strategies, "--report", str(tmp_path),
                 "--json", str(tmp_path / "out.json")])


def test_the_showdown_help_is_the_module_docstring_first_line():
    help_text = build_parser().format_help()
    assert "Every strategy against the same 1000-buyer spike" in help_text


def test_an_oversold_sale_under_a_safe_strategy_makes_the_showdown_fail(tmp_path, capsys):
    with serve(StubShop(oversell=2)) as url:
        code = showdown(url, tmp_path, "naive,token")
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED: token: marked safe but sold 12, oversold 2" in out
    assert "FAILED: naive" not in out
    results = {r["strategy"]: r for r in json.loads((tmp_path / "out.json").read_text())
               ["results"]}
    assert results["naive"]["verdict"] == "unsafe, as taught"
    assert results["token"]["oversold"] == 2 and results["token"]["verdict"] == "FAIL"


def test_a_safe_strategy_that_sold_to_a_buyer_twice_fails_naming_it(tmp_path, capsys):
    """The FAILED line said "sold 10, oversold 0, consistent True": not why it failed
    (a showdown audit)."""
    with serve(StubShop(duplicate_buyers=1)) as url:
        code = showdown(url, tmp_path, "token")
    out = capsys.readouterr().out
    assert code == 1
    assert ("FAILED: token: marked safe but sold 10, oversold 0, lost 0, duplicate buyers "
            "1, consistent True") in out, out[-2000:]


def test_the_summary_of_a_phase_names_its_lost_orders_and_duplicate_buyers():
    from loadtest.compare import StrategyResult
    from loadtest.showdown import _summary

    lost = StrategyResult("token", True, users=10, stock=10, sold=8, lost=2, duplicates=1,
                          consistent=True)
    assert lost.verdict == "FAIL"
    assert _summary(lost).startswith(
        "sold 8, oversold 0, lost 2, duplicate buyers 1, consistent True,")


def test_an_exact_sale_passes_and_leaves_the_report_and_raw_data(tmp_path, capsys,
                                                                 monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    with serve(StubShop()) as url:
        code = showdown(url, tmp_path, "token")
    assert code == 0
    table = capsys.readouterr().out
    assert "strategy" in table and "token" in table
    # the shop's Redis is its own: the blank redis/purchase column says why
    assert "note: redis/purchase needs the shop's Redis: set REDIS_URL" in table
    assert (tmp_path / "index.html").exists() and (tmp_path / "summary.json").exists()
    raw = {p.name for p in (tmp_path / "raw").iterdir()}
    assert {"token_stats.csv", "token_stats_history.csv", "token_arrivals.jsonl"} <= raw


def test_the_shared_report_and_json_do_not_carry_the_admin_token(tmp_path, monkeypatch):
    """index.html, summary.json and --json recorded the command line as typed, with
    the shop's admin token in plain text (a showdown audit)."""
    with serve(StubShop(token="s3cret-token")) as url:
        argv = ["showdown", "--url", url, "--admin-token", "s3cret-token", "--users", "5",
                "--stock", "2", "--strategies", "token", "--report", str(tmp_path),
                "--json", str(tmp_path / "out.json")]
        monkeypatch.setattr("sys.argv", ["seckill", *argv])
        assert main(argv) == 0
    for name in ("index.html", "summary.json", "out.json"):
        text = (tmp_path / name).read_text()
        assert "--admin-token" in text and "s3cret" not in text, name


def test_a_second_run_into_the_same_report_links_only_its_own_raw_files(tmp_path, capsys):
    # the first run's raw files stayed in raw/ and the second's index.html linked them
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "shop.log").write_text("an earlier served run's\n")
    with serve(StubShop()) as url:
        assert showdown(url, tmp_path, "naive") == 0
        assert showdown(url, tmp_path, "token") == 0
    page = (tmp_path / "index.html").read_text()
    assert "raw/token_stats.csv" in page and "raw/naive" not in page
    assert "raw/shop.log" not in page  # a shop at --url keeps its log to itself
    assert (tmp_path / "raw" / "naive_stats.csv").exists()  # left, not deleted


def test_a_reset_that_fails_once_is_retried_and_one_that_keeps_failing_is_an_error(tmp_path):
    with serve(StubShop(failing_resets=1)) as url:
        assert ShopClient(url, "t").reset_sale("sku-1", 5, "token", 0)["stock"] == 5
    with serve(StubShop(failing_resets=99)) as url, pytest.raises(ShopError, match="500"):
        ShopClient(url, "t").reset_sale("sku-1", 5, "token", 0, attempts=2)


def test_paired_puts_a_post_no_op_after_every_strategy_phase(tmp_path, monkeypatch, capsys):
    from loadtest import showdown as module
    from loadtest.compare import StrategyResult
    from loadtest.phase import Plan

    ran = []

    def fake_phase(shop, redis_clients, name, safe, plan, raw_dir, round_no=0):
        ran.append((name, plan.mode, round_no))
        return StrategyResult(name, safe, mode=plan.mode, round_no=round_no)

    monkeypatch.setattr(module, "run_phase", fake_phase)
    target = type("Target", (), {"shop": None, "redis_clients": []})()
    module.run_showdown(target, ["token", "atomic"], Plan(mode="sustained"), tmp_path,
                        rounds=2, paired=True)
    progress = capsys.readouterr().out.splitlines()
    # a baseline resets and audits nothing: its progress line said it did
    assert "[1/10] no-op baseline: 1000 buyers (noop) ..." in progress
    assert "[3/10] token: reset, 1000 buyers (sustained), audit ..." in progress
    assert ran == [
        ("no-op baseline", "noop", 0), ("no-op GET (old)", "noop-get", 0),
        ("token", "sustained", 1), ("no-op baseline (after token)", "noop", 1),
        ("atomic", "sustained", 1), ("no-op baseline (round 1)", "noop", 1),
        ("token", "sustained", 2), ("no-op baseline (after token #2)", "noop", 2),
        ("atomic", "sustained", 2), ("no-op baseline (end)", "noop", 2)]


def test_paired_is_refused_without_sustained(tmp_path, capsys):
    assert main(["showdown", "--report", str(tmp_path), "--paired"]) == 2
    assert "--paired is for --sustained" in capsys.readouterr().err


@pytest.mark.parametrize("token, why", [
    ("wrong", "the shop refused the admin token"),
    ("", "no admin token for the shop: give --admin-token or set SECKILL_ADMIN_TOKEN"),
])
def test_a_refused_admin_token_is_one_line_before_any_phase(tmp_path, capsys, monkeypatch,
                                                           token, why):
    # every phase used to run and fail with the same 401 in the table
    monkeypatch.delenv("SECKILL_ADMIN_TOKEN", raising=False)
    shop = StubShop()
    with serve(shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", token, "--users", "5",
                     "--stock", "2", "--strategies", "token"])
    err = capsys.readouterr()
    assert code == 1 and f"seckill showdown: error: {why}" in err.err
    assert "[1/" not in err.out and shop.initial == 10  # no phase ran, nothing reset


def test_a_url_that_is_not_a_seckill_shop_is_named_before_any_phase(capsys):
    from werkzeug.wrappers import Response

    def not_a_shop(environ, start_response):
        return Response("<html>hello</html>", 200, mimetype="text/html")(
            environ, start_response)

    with serve(not_a_shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", "5",
                     "--stock", "2", "--strategies", "token"])
    err = capsys.readouterr().err
    assert code == 1 and f"{url} does not look like a seckill shop" in err
    assert f"GET {url}/api/strategies" in err and "root URL" in err  # where it asked


def test_a_shop_url_below_its_root_names_the_url_it_asked(capsys):
    # "/shop" was reported as "GET /api/strategies -> HTTP 404", though /shop/api/... it was
    with serve(StubShop()) as url:
        code = main(["showdown", "--url", url + "/shop", "--admin-token", "t", "--users", "5",
                     "--stock", "2", "--strategies", "token"])
    err = capsys.readouterr().err
    assert code == 1 and f"GET {url}/shop/api/strategies: HTTP 404" in err, err


@pytest.mark.parametrize("suffix", ["/?x=1", "/#top"])
def test_a_shop_url_with_a_query_or_fragment_is_a_usage_error(capsys, suffix):
    with pytest.raises(SystemExit) as stopped:
        main(["showdown", "--url", "http://127.0.0.1:9" + suffix, "--users", "5"])
    assert stopped.value.code == 2 and "give the shop's root URL" in capsys.readouterr().err


@pytest.mark.parametrize("argv, why", [
    (["--stock", "2000000"], "argument --stock: must be at most 1000000, not 2000000"),
    # one Locust process: 10**8 began a phase (a CLI audit)
    (["--users", "100000000"], "argument --users: must be at most 10000, not 100000000"),
    (["--work-ms", "20000"], "argument --work-ms: must be at most 10000, not 20000"),
    (["--workers", "1000"], "argument --workers: must be at most 64, not 1000"),
    # the buyers wait 30 s for an answer: a longer lock wait made orders no one heard of
    (["--lock-timeout", "30"], "argument --lock-timeout: must be at most 25 seconds, not 30"),
    (["--lock-timeout", "1e300"], "argument --lock-timeout: must be at most 25 seconds"),
    # the phases are planned up front: 10**8 rounds served the shop, then raised
    # MemoryError tracebacks (a CLI audit)
    (["--sustained", "--rounds", "101"], "argument --rounds: must be at most 100, not 101"),
])
def test_what_the_shop_would_refuse_in_every_phase_is_a_usage_error(argv, why, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["showdown", *argv])
    assert stop.value.code == 2 and why in capsys.readouterr().err


def test_the_showdown_limits_are_the_shops():
    from loadtest.showdown import SHOP_MAX_STOCK, SHOP_MAX_WORK_MS
    from webapp.admin import MAX_STOCK, MAX_WORK_MS

    assert (SHOP_MAX_STOCK, SHOP_MAX_WORK_MS) == (MAX_STOCK, MAX_WORK_MS)


def test_a_sale_cut_short_by_an_outage_is_exact_but_noted_under_the_table(tmp_path, capsys):
    # a Redis down mid-sale: every phase "ok", and nothing said that 6 units never sold
    with serve(StubShop(busy_after=4)) as url:
        code = showdown(url, tmp_path, "token")
    out = capsys.readouterr().out
    assert code == 0  # nothing wrong was sold: not a failure
    assert "note: token left 6 of 10 units unsold while " in out
    assert "answers were 503 busy" in out


def test_orders_no_buyer_heard_of_are_noted_under_the_table(tmp_path, capsys):
    """A buyer that gave up waiting (or got an undocumented answer) while the shop made
    its order: the row said "ok" and nothing else did (a showdown audit, 51 of 60
    purchases timed out with --lock-timeout 30)."""
    with serve(StubShop(answers_lost_after=7)) as url:
        code = showdown(url, tmp_path, "token")
    out = capsys.readouterr().out
    assert code == 0  # nothing wrong was sold
    assert "note: token: 3 purchase attempts had no answer or an undocumented one, and 3 " \
           "orders were made that no buyer was told about" in out, out[-2000:]


def test_a_lost_order_is_seen_though_an_order_no_buyer_heard_of_evens_the_count(
        tmp_path, capsys):
    """Lost (told 201, no row) and unconfirmed (a row, its answer lost) were counts,
    ``told_ok - orders`` and ``orders - told_ok``: one of each cancelled out to "lost
    0, ok", exit 0 (a showdown audit). They are compared buyer by buyer now."""
    shop = StubShop(unwritten_at=2, answers_lost_after=9)
    with serve(shop) as url:
        code = showdown(url, tmp_path, "token")
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "out.json").read_text())["results"][0]
    assert len(shop.unwritten) == 1 and len(shop.orders) == 10  # a lost one, 10 rows
    assert (result["lost"], result["unconfirmed"], result["verdict"]) == (1, 1, "FAIL")
    assert code == 1 and "FAILED: token: marked safe but sold 10, oversold 0, lost 1" in out


def test_the_buyers_with_an_order_are_read_page_by_page():
    shop = StubShop(buyers_page=2)
    for user in ("cy", "ann", "dee", "bob", "ed"):
        shop.purchase(user)
    with serve(shop) as url:
        assert ShopClient(url, "t").buyers("sku-1") == {"ann", "bob", "cy", "dee", "ed"}
        with pytest.raises(ShopError, match="401"):
            ShopClient(url, "wrong").buyers("sku-1")


def test_a_sale_that_sold_out_has_no_note(tmp_path, capsys):
    with serve(StubShop()) as url:
        assert showdown(url, tmp_path, "token") == 0
    assert "unsold" not in capsys.readouterr().out


def test_results_it_cannot_write_are_one_line_after_the_run(tmp_path, capsys):
    # the check before the run passes /dev/full (a writable file): the write raised
    with serve(StubShop()) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", "5",
                     "--stock", "2", "--strategies", "token", "--json", "/dev/full"])
    err = capsys.readouterr().err
    assert code == 1 and "seckill showdown: error: could not write /dev/full" in err


def test_a_json_file_its_folder_refuses_is_refused_before_the_run(monkeypatch, capsys):
    """As root every folder's mode bits let us in: ``--json /sys/kernel/x.json`` ran the
    whole showdown and was refused only then, exit 1 as if a strategy had failed (a
    showdown audit). The file is made, and removed, before anything starts."""
    import os

    from loadtest import showdown as module

    if not os.path.isdir("/sys/kernel"):
        pytest.skip("no sysfs here: nothing refuses a new file by itself")
    started = []
    monkeypatch.setattr(module, "_run", lambda *args: started.append(args) or 0)
    code = main(["showdown", "--json", "/sys/kernel/seckill-results.json"])
    err = capsys.readouterr().err
    assert code == 2 and not started, err
    assert err.startswith("seckill showdown: error: --json /sys/kernel/seckill-results.json: "), err
    assert not os.path.exists("/sys/kernel/seckill-results.json")


@pytest.mark.parametrize("url", ["http://bob:s3cretpw@127.0.0.1:8000/",
                                 "http://bob:s3cretpw@127.0.0.1:8000/?x=1",  # a review
                                 "ftp://bob:s3cretpw@127.0.0.1:8000/",
                                 "http://bob:s3c/re?tpw@127.0.0.1:8000/"])
def test_a_url_with_a_password_is_refused_without_printing_it(capsys, url):
    # urllib read "bob:s3cretpw@127.0.0.1" as a host name, and the error printed the
    # password (a showdown audit)
    with pytest.raises(SystemExit) as exited:  # argparse's own error
        main(["showdown", "--url", url, "--admin-token", "t"])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "s3c" not in err and "tpw" not in err, err
    assert "a user or password in the URL is not supported" in err
    assert "like " in err and "://127.0.0.1:8000/" in err


def test_workers_and_lock_timeout_with_url_are_refused_not_ignored(capsys):
    # both set the shop the showdown serves; with --url they were silently dropped
    for flag, value in (("--workers", "3"), ("--lock-timeout", "5")):
        code = main(["showdown", "--url", "http://127.0.0.1:9", "--admin-token", "t",
                     flag, value])
        err = capsys.readouterr().err
        assert code == 2 and "the shop at --url keeps its own" in err, (flag, err)


def test_duration_without_sustained_is_refused_not_ignored(capsys):
    code = main(["showdown", "--duration", "30"])
    assert code == 2 and "--duration is for --sustained runs" in capsys.readouterr().err


@pytest.mark.parametrize("argv, why", [
    (["--sustained", "--stock", "50"], "--stock is for flash sales; a --sustained phase has "
                                       "1,000,000 units"),
    (["--admin-token", "t"], "--admin-token is for a shop at --url"),
    # wrote no report and exited 0, where --json '' is refused (a showdown audit)
    (["--report", ""], "--report needs a directory name"),
    # said "--json : . is a directory, not a file" (a showdown audit)
    (["--json", ""], "--json needs a file name (like --json results.json)"),
    # every phase broke: "ERROR: Locust made no requests" of purchases still waiting
    # for their 3 s section when the 2 s run ended (a showdown audit)
    (["--sustained", "--duration", "2", "--work-ms", "3000"],
     "--work-ms 3000 is at or above the sustained phase's --duration of 2 s"),
    (["--sustained", "--work-ms", "10000"],
     "--work-ms 10000 is at or above the sustained phase's --duration of 10 s"),
])
def test_options_the_run_would_ignore_are_refused_before_anything_starts(
        monkeypatch, capsys, argv, why):
    """``--stock`` with ``--sustained`` was silently 1,000,000 (the report's settings said
    so), and ``--admin-token`` without ``--url`` went unused (a showdown audit)."""
    from loadtest import showdown as module

    started = []
    monkeypatch.setattr(module, "_run", lambda *args: started.append(args) or 0)
    code = main(["showdown", *argv])
    err = capsys.readouterr().err
    assert code == 2 and not started
    assert err.startswith(f"seckill showdown: error: {why}") and err.count("\n") == 1, err


@pytest.mark.parametrize("name, value", [("REDIS_URL", "localhost:6379"),
                                         ("REDLOCK_URLS", "redis://127.0.0.1:1,localhost:2")])
def test_a_malformed_redis_url_with_url_is_one_line_naming_it_before_the_shop_is_asked(
        monkeypatch, capsys, name, value):
    """With ``--url`` the showdown reads the shop's Redis for redis/purchase: a URL
    without its scheme was a ValueError traceback, after the shop had been contacted
    (a showdown audit)."""
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("REDLOCK_URLS", raising=False)
    monkeypatch.setenv(name, value)
    shop = StubShop()
    with serve(shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", "5",
                     "--stock", "2", "--strategies", "token"])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith(f"seckill showdown: error: {name}: ") \
        and "is not a Redis URL" in err and err.count("\n") == 1, err
    assert "[1/" not in out and shop.initial == 10  # nothing was reset


def test_a_flash_sale_without_stock_has_the_default_and_a_sustained_run_its_own():
    from loadtest.showdown import plan_from

    parser = build_parser()
    assert plan_from(parser.parse_args(["showdown"])).stock == 100
    assert plan_from(parser.parse_args(["showdown", "--stock", "7"])).stock == 7
    assert plan_from(parser.parse_args(["showdown", "--sustained"])).stock == 1_000_000


#: what a shop with no ZOOKEEPER_HOSTS says it lacks (GET /api/strategies?unusable=true)
NO_ZOOKEEPER = {"zookeeper": "strategy 'zookeeper' needs ZOOKEEPER_HOSTS"}


def _url_args(url: str) -> argparse.Namespace:
    return argparse.Namespace(url=url, admin_token="t")


def test_url_leaves_out_of_the_default_list_what_the_shop_cannot_run(capsys):
    # a plain `seckill serve` has no ZOOKEEPER_HOSTS: the default run reset sku-1 to
    # zookeeper, got 400, printed a traceback and exited 1
    from loadtest.serving import serve_target

    shop = StubShop(strategies=("naive", "token", "zookeeper"), unusable=NO_ZOOKEEPER)
    with serve(shop) as url, serve_target(_url_args(url), ["token", "zookeeper"]) as target:
        assert target.strategies == ["token"]
        assert target.notes == [f"zookeeper skipped: the shop at {url} cannot run it "
                                "(strategy 'zookeeper' needs ZOOKEEPER_HOSTS)"]


def test_url_with_a_named_strategy_the_shop_cannot_run_is_one_line_before_any_phase(
        tmp_path, capsys):
    shop = StubShop(strategies=("naive", "token", "zookeeper"), unusable=NO_ZOOKEEPER)
    with serve(shop) as url:
        code = showdown(url, tmp_path, "token,zookeeper")
    out, err = capsys.readouterr()
    assert code == 1 and "[1/" not in out and "Traceback" not in out + err
    assert (f"error: the shop at {url} cannot run zookeeper: strategy 'zookeeper' needs "
            "ZOOKEEPER_HOSTS") in err
    assert shop.initial == 10  # nothing was reset


def test_a_run_refused_before_any_phase_leaves_no_new_report_or_json_folder(tmp_path, capsys):
    """The report folder was made up front, to check it could be written, and a run
    refused after that (a strategy the shop cannot run) left it behind, empty (a
    showdown audit)."""
    shop = StubShop(strategies=("naive", "token", "zookeeper"), unusable=NO_ZOOKEEPER)
    report, out = tmp_path / "new" / "report", tmp_path / "other" / "out.json"
    with serve(shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", "5",
                     "--strategies", "token,zookeeper", "--report", str(report),
                     "--json", str(out)])
    assert code == 1 and "cannot run zookeeper" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_phase_the_shop_refuses_is_one_line_not_a_traceback(tmp_path, caplog):
    with serve(StubShop(failing_resets=99)) as url:
        assert showdown(url, tmp_path, "token") == 1
    failed = [r for r in caplog.records if "phase token failed" in r.getMessage()]
    assert failed and all(r.exc_info is None for r in failed)
    assert "HTTP 500" in failed[0].getMessage()


@pytest.mark.parametrize("blocker", ["raw", "index.html", "summary.json"])
def test_a_report_dir_the_run_could_not_write_into_is_refused_before_the_run(
        tmp_path, capsys, blocker):
    # raw/ as a file failed with a traceback once the shop was served; index.html as a
    # directory failed after the whole run
    report = tmp_path / "report"
    report.mkdir()
    if blocker == "raw":
        (report / "raw").write_text("")
    else:
        (report / blocker).mkdir()
    shop = StubShop()
    with serve(shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", "5",
                     "--stock", "2", "--strategies", "token", "--report", str(report)])
    out, err = capsys.readouterr()
    assert code == 2 and f"--report {report}: {report / blocker}" in err
    assert "[1/" not in out and shop.initial == 10


def test_a_served_shop_that_cannot_run_zookeeper_after_all_skips_it(monkeypatch, capsys):
    # ZOOKEEPER_HOSTS set but no kazoo: the default run reset sku-1 to zookeeper, got 400
    # ("needs kazoo") and exited 1; the shop it serves is asked, as one at --url is
    from loadtest import serving

    lacking = {"zookeeper": "strategy 'zookeeper' needs kazoo, which is not installed"}
    monkeypatch.setattr(serving.ShopClient, "unusable_strategies", lambda self: lacking)
    monkeypatch.setenv("ZOOKEEPER_HOSTS", "127.0.0.1:1")
    args = argparse.Namespace(url=None, admin_token=None, workers=1, lock_timeout=None)
    with serving.serve_target(args, ["token", "zookeeper"]) as target:
        assert target.strategies == ["token"]
        assert "zookeeper skipped" in target.notes[-1] and "kazoo" in target.notes[-1]


def test_a_report_path_that_is_a_file_is_refused_saying_dir_names_a_folder(
        tmp_path, monkeypatch, capsys):
    # "--report report.html: File exists": the user had named the page, not its folder
    from loadtest import showdown as module

    page = tmp_path / "report.html"
    page.write_text("mine")
    monkeypatch.setattr(module, "_run", lambda *args: 0)
    code = main(["showdown", "--report", str(page)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"--report {page}: a file, not a directory" in err, err
    assert page.read_text() == "mine"


@pytest.mark.parametrize("token, why", [
    (b"t\xf6k".decode("utf-8", "surrogateescape"), "--admin-token is not UTF-8 text"),
    ("a\nb", "--admin-token has a control character"),
])
def test_an_admin_token_no_header_can_carry_is_a_usage_error_naming_it(
        monkeypatch, capsys, token, why):
    # Latin-1 bytes or a pasted newline: "cannot reach the shop: 'utf-8' codec can't
    # encode ..." (exit 1), about a call that never left this process
    from loadtest import showdown as module

    started = []
    monkeypatch.setattr(module, "_run", lambda *args: started.append(args) or 0)
    code = main(["showdown", "--url", "http://127.0.0.1:9", "--admin-token", token])
    err = capsys.readouterr().err
    assert code == 2 and not started
    assert err.startswith(f"seckill showdown: error: {why}") and err.count("\n") == 1, err


def test_an_admin_token_from_the_environment_no_header_can_carry_names_the_variable(
        monkeypatch, capsys):
    from loadtest import showdown as module

    monkeypatch.setattr(module, "_run", lambda *args: 0)
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "a\rb")
    code = main(["showdown", "--url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "error: SECKILL_ADMIN_TOKEN has a control character" in err, err


def test_ctrl_c_mid_run_reports_the_phases_that_finished_and_exits_130(tmp_path, capsys,
                                                                        monkeypatch):
    """A showdown interrupted minutes in printed one line: the finished phases' figures
    went with the scratch folder, and no report was written (a left-alone item)."""
    from loadtest import showdown as module

    real_phase = module.run_phase
    calls = []

    def interrupted_second(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_phase(*args, **kwargs)

    monkeypatch.setattr(module, "run_phase", interrupted_second)
    with serve(StubShop(oversell=2)) as url:
        code = showdown(url, tmp_path, "token,naive,atomic")
    out = capsys.readouterr().out
    assert code == 130
    assert calls == ["token", "naive"]  # the third phase never ran
    assert "showdown interrupted after 1 of 3 phases" in out, out[-2000:]
    # the finished phase is judged: a safe strategy that oversold still says so
    assert "FAILED: token: marked safe but sold 12, oversold 2" in out, out[-2000:]
    summary = json.loads((tmp_path / "out.json").read_text())
    assert [r["strategy"] for r in summary["results"]] == ["token"]
    assert summary["interrupted"] == "interrupted after 1 of 3 phases: the table has only those"
    page = (tmp_path / "index.html").read_text()
    assert "Showdown interrupted after 1 of 3 phases" in page
    assert "raw/token_stats.csv" in page


def test_ctrl_c_in_the_first_phase_is_the_plain_interrupt(tmp_path, capsys, monkeypatch):
    from loadtest import showdown as module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run_phase", interrupted)
    with serve(StubShop()) as url:
        code = showdown(url, tmp_path, "token")
    captured = capsys.readouterr()
    assert code == 130
    assert "showdown interrupted; everything it started is stopped" in captured.err
    assert not (tmp_path / "index.html").exists()  # nothing ran: nothing to report


def test_a_broken_phases_row_has_its_plan_and_no_audit_not_consistent_no(tmp_path, monkeypatch):
    """A broken phase's row and JSON said "consistent NO", users 0 and stock 0, of a
    sale no audit had read (a showdown audit)."""
    from loadtest import showdown as module
    from loadtest.compare import format_table
    from loadtest.phase import PhaseBroken, Plan

    def broken(*args, **kwargs):
        raise PhaseBroken("no request finished within the run: 1 still in flight")

    monkeypatch.setattr(module, "run_phase", broken)
    target = type("Target", (), {"shop": None, "redis_clients": []})()
    results = module.run_showdown(target, ["token"], Plan(users=7, stock=3), tmp_path)
    (row,) = [r.as_dict() for r in results]
    assert (row["users"], row["stock"], row["consistent"], row["verdict"]) == \
        (7, 3, None, "ERROR")
    line = format_table(results).splitlines()[2].split()
    assert line[5] == "-" and line[-1] == "ERROR", line


def test_a_ctrl_c_that_came_back_from_a_phase_as_another_error_stops_the_run(
        tmp_path, capsys, monkeypatch):
    """A Ctrl-C swallowed on its way (kazoo's bare ``except:`` raises
    ConnectionClosedError instead) was one broken phase: the next phases ran, with every
    later Ctrl-C ignored (``webapp.cli.stop_on_term``; a labs audit)."""
    from loadtest import showdown as module
    from webapp import cli

    real_phase = module.run_phase
    calls = []

    def interrupted_second(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            cli.STOPPING.set()  # what ``webapp.cli.stop_on_term`` does first
            raise ConnectionError("Connection has been closed")
        return real_phase(*args, **kwargs)

    monkeypatch.setattr(module, "run_phase", interrupted_second)
    try:
        with serve(StubShop()) as url:
            code = showdown(url, tmp_path, "token,naive,atomic")
    finally:
        cli.STOPPING.clear()
    out = capsys.readouterr().out
    assert code == 130
    assert calls == ["token", "naive"]  # the third phase never ran
    assert "showdown interrupted after 1 of 3 phases" in out, out[-2000:]
