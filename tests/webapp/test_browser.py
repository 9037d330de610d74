"""The storefront in Debian's Chromium (Playwright): buy, watch the stock fall, sell out."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

import pytest

from tests.support import missing_system_part
from tests.webapp.served import reset_sale
from webapp.serve import ServedApp

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
#: what a card says of a confirmation a reset deleted
TAKEN_BACK = "An admin reset this sale: its orders, yours too, were deleted."


@pytest.fixture
def page() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        missing_system_part(f"{CHROMIUM} is missing (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            yield browser.new_page(viewport={"width": 1200, "height": 800})
        finally:
            browser.close()


def test_a_shopper_buys_sees_the_stock_fall_and_then_the_sold_out_state(page, tmp_path):
    # screenshots go to pytest's tmp_path (it keeps the last three runs), not /tmp
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=2, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".strategy-name")).to_have_text("token")
        expect(card.locator(".stock")).to_have_text("2")

        page.fill("#user-name", "alice")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card.locator(".stock")).to_have_text("1")  # the poll brought the new stock

        card.locator(".buy").click()  # alice again: one per person
        expect(card.locator(".message")).to_contain_text("already have one")

        page.fill("#user-name", "bob")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card.locator(".stock")).to_have_text("0")
        expect(card).to_have_class("card sold-out")
        expect(card.locator(".buy")).to_be_disabled()
        expect(card.locator(".buy .label")).to_have_text("Sold out")
        page.screenshot(path=tmp_path / "storefront.png", full_page=True)

        page.goto(app.url + "/admin")
        expect(page.locator("#a-units_sold")).to_have_text("2")
        expect(page.locator("#a-consistent")).to_have_text("true")
        page.fill("#token", app.admin_token)
        page.select_option("#strategy", "atomic")
        page.fill("#stock", "3")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_contain_text("Reset sku-1: 3 units")
        expect(page.locator("#a-units_sold")).to_have_text("0")
        expect(page.locator("#a-strategy")).to_have_text("atomic")
        page.screenshot(path=tmp_path / "admin.png", full_page=True)


def test_every_text_drawn_reads_at_4_5_to_1_sold_out_cards_too(page):
    # test_page_colours checks the colour pairs in style.css; a sold-out card was faded
    # with opacity .8, which put its button, messages and description under 3.9:1, and
    # the strategy's code box was 4.34:1: measure what the browser actually draws
    from pathlib import Path

    from playwright.sync_api import expect

    low_contrast = (Path(__file__).parent / "js" / "low_contrast.js").read_text()
    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=1, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        page.fill("#user-name", "alice")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card).to_have_class("card sold-out")
        # its name starts with what it shows (WCAG 2.5.3), then says which product
        expect(card.get_by_role("button", name=re.compile("^Sold out – Mechanical keyboard$"))
               ).to_be_disabled()
        assert page.evaluate(low_contrast) == []
        page.goto(app.url + "/admin")
        expect(page.locator("#a-units_sold")).to_have_text("1")
        assert page.evaluate(low_contrast) == []


@pytest.mark.parametrize("lost_as, said", [(None, "Network error"),
                                           (502, "the shop did not answer"),
                                           (504, "the shop did not answer")],
                         ids=["reply-lost", "proxy-502", "proxy-504"])
def test_a_retry_after_a_lost_reply_confirms_the_order_the_shop_made(page, lost_as, said):
    # the purchase reaches the shop, its reply is lost: a fresh Idempotency-Key on the
    # retry made it "already purchased"; the same key gets the order back (200). A
    # proxy's 502/504 in JSON (deploy/nginx.conf) is no final answer either: the page
    # took a JSON answer that was not 503 for one and dropped the key
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        lost: list[int] = []

        def lose_the_first_reply(route):
            if lost:
                route.continue_()
                return
            lost.append(route.fetch().status)  # the shop made the order
            if lost_as is None:
                route.abort()
            else:
                route.fulfill(status=lost_as, headers={"Retry-After": "1"},
                              json={"error": "gateway_timeout",
                                    "detail": "the shop did not answer"})

        page.route("**/purchase", lose_the_first_reply)
        page.fill("#user-name", f"frank-{lost_as}")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text(said)
        assert lost == [201]
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed! Order #")
        expect(card.locator(".stock")).to_have_text("4")


def test_the_page_says_so_when_the_shop_stops_answering(page):
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        page.goto(app.url + "/")
        expect(page.locator("#offline")).to_be_hidden()
        page.route("**/api/products", lambda route: route.abort())
        expect(page.locator("#offline")).to_be_visible(timeout=5_000)
        page.unroute("**/api/products")
        expect(page.locator("#offline")).to_be_hidden(timeout=5_000)


def test_a_link_slower_than_the_poll_timeout_still_shows_new_stock(page):
    # every poll was given up at 3 s: on a link that slow the page never showed new
    # stock, and said the shop was not answering while it answered every poll
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')

        def slow(route):
            reply = route.fetch()
            page.wait_for_timeout(3_500)
            route.fulfill(response=reply)

        page.route("**/api/products", slow)
        reset_sale(app, "sku-1", stock=77, strategy="token")
        expect(card.locator(".stock")).to_have_text("77", timeout=15_000)
        page.wait_for_timeout(8_000)  # a few slow polls more
        expect(page.locator("#offline")).to_be_hidden()


def test_a_reset_clears_the_old_sales_message_and_a_new_product_gets_a_card(page):
    # the card said "Confirmed!" about a sale the admin has since reset; and a product
    # seeded after the page loaded had no card until a reload
    from playwright.sync_api import expect
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from webapp import sales

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        meter = card.get_by_role("progressbar")
        expect(meter).to_have_attribute("aria-valuenow", "5")
        # read out as the card says it ("97%" said nothing of the units; a browser audit),
        # and the name field's hint is its description
        expect(meter).to_have_attribute("aria-valuetext", "5 of 5 left")
        expect(page.locator("#user-name")).to_have_accessible_description(
            "one order per person per sale")
        page.fill("#user-name", "grace")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(meter).to_have_attribute("aria-valuenow", "4")
        expect(meter).to_have_attribute("aria-valuetext", "4 of 5 left")

        reset_sale(app, "sku-1", stock=5, strategy="token")
        expect(card.locator(".sold")).to_have_text("0")
        # the confirmation was heard: it is taken back in words, not just wiped
        expect(card.locator(".message")).to_have_text(TAKEN_BACK)
        expect(meter).to_have_attribute("aria-valuenow", "5")

        engine = create_engine(app.database_url)
        try:
            assert sales.create_product(sessionmaker(engine), "sku-late", "Late Lamp", 1250,
                                        stock=7, strategy="atomic", description="seeded late")
        finally:
            engine.dispose()
        late = page.locator('.card[data-sku="sku-late"]')
        expect(late.locator("h2")).to_have_text("Late Lamp")
        expect(late.locator(".price")).to_have_text("$12.50")
        expect(late.locator(".stock")).to_have_text("7")
        expect(late.get_by_role("button", name="Buy now – Late Lamp")).to_be_enabled()


def test_a_purchase_answered_after_a_reset_it_straddled_does_not_just_say_confirmed(page):
    # a lock path's section ends (201) and then the admin reset that waited for it
    # deletes the order: the poll saw the reset while the purchase was out, the reset
    # was used up, and "Confirmed! Order #N" stayed for an order that no longer exists
    import threading

    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token", work_ms=1500)
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        answered = threading.Event()

        def late_reply(route):  # the answer reaches the page after the reset shows
            reply = route.fetch()
            answered.set()
            page.wait_for_timeout(1_500)  # (runs in the page's event loop)
            route.fulfill(response=reply)

        page.route("**/purchase", late_reply)
        page.fill("#user-name", "hal")
        card.locator(".buy").click()
        page.wait_for_timeout(500)  # the purchase is in its section
        resetter = threading.Thread(target=reset_sale, args=(app, "sku-1"),
                                    kwargs={"stock": 5, "strategy": "token"})
        resetter.start()  # waits for the section, then deletes the order
        # the order names the sale it was written in, older than the one the page has
        # polled since: deleted, and said so (no "if the reset came after it")
        expect(card.locator(".message")).to_contain_text(
            "was confirmed, then an admin reset this sale: its orders, yours too, were "
            "deleted.", timeout=15_000)
        resetter.join(30)
        assert answered.is_set()
        expect(card.locator(".message")).not_to_contain_text("Confirmed!")


def test_an_order_bought_after_a_reset_the_page_has_not_polled_yet_stays_confirmed(page):
    # the admin resets, a buyer clicks before the next poll: the order is the new
    # sale's, and that poll called it deleted ("An admin reset this sale: ... yours too")
    # while the audit counted it and a second click heard "already have one"
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".stock")).to_have_text("5")
        page.route("**/api/products", lambda route: route.abort())  # no poll sees it yet
        page.wait_for_timeout(700)
        reset_sale(app, "sku-1", stock=9, strategy="atomic")
        page.fill("#user-name", "ivy")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed!")
        page.unroute("**/api/products")
        expect(card.locator(".stock")).to_have_text("8")  # the poll has seen the new sale
        expect(card.locator(".strategy-name")).to_have_text("atomic")
        page.wait_for_timeout(1_200)  # a few more polls
        expect(card.locator(".message")).to_contain_text("Confirmed!")

        reset_sale(app, "sku-1", stock=9, strategy="atomic")  # this one deletes it
        expect(card.locator(".message")).to_have_text(TAKEN_BACK)


def test_a_deleted_order_is_taken_back_when_the_first_poll_through_shows_the_new_sale(page):
    # the page's polls failed from the start: its first poll through already showed the
    # sale after the reset, saw no reset (nothing to compare with), and "Confirmed!"
    # stayed for an order the reset had deleted (a review)
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.route("**/api/products", lambda route: route.abort())
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        page.fill("#user-name", "jo")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed!")
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.unroute("**/api/products")
        expect(card.locator(".message")).to_have_text(TAKEN_BACK)


def test_a_reset_that_sells_more_before_the_next_poll_still_clears_the_message(page):
    # the page told a new sale by fewer units sold: a reset followed, before its next
    # poll, by more sales than the old sale had left "Confirmed!" about the old sale
    from playwright.sync_api import expect

    from tests.webapp.served import call

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="atomic")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        page.fill("#user-name", "ada")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card.locator(".sold")).to_have_text("1")

        page.route("**/api/products", lambda route: route.abort())  # no poll sees it
        page.wait_for_timeout(700)
        reset_sale(app, "sku-1", stock=5, strategy="atomic")
        for user in ("bo", "cy"):
            status, _ = call(f"{app.url}/api/products/sku-1/purchase", "POST",
                             {"user_id": user})
            assert status == 201
        page.unroute("**/api/products")
        expect(card.locator(".sold")).to_have_text("2")
        expect(card.locator(".message")).to_have_text(TAKEN_BACK)


def test_a_purchase_with_no_answer_is_reported_and_its_retry_is_the_same_purchase(page):
    # a request that hangs left the card on "Buying…" for good
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.clock.install()
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        keys: list[str] = []

        def hang_the_first(route):
            keys.append(route.request.headers["idempotency-key"])
            if len(keys) > 1:
                route.continue_()  # the first is never answered (nor sent on)

        page.route("**/purchase", hang_the_first)
        page.fill("#user-name", "heidi")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text("Buying…")
        # the page waits past the shop's worst case: lock wait 10 s + work 10 s + write 10 s
        said = int(float(page.locator("[data-purchase-timeout-s]").first
                         .get_attribute("data-purchase-timeout-s") or 0))
        assert said > 30, said
        page.clock.run_for(30_000)
        expect(card.locator(".message")).to_have_text("Buying…")
        page.clock.run_for((said - 30) * 1000 + 1_000)
        expect(card.locator(".message")).to_contain_text(f"No answer in {said}s")
        expect(card.locator(".buy")).to_be_enabled()
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed! Order #")
        assert len(keys) == 2 and keys[0] == keys[1]


def test_the_pages_run_under_their_content_security_policy(page):
    # the pages now send a CSP: their own scripts, styles and icon must still load
    from playwright.sync_api import expect

    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text)
            if "Content Security Policy" in message.text else None)
    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=4, strategy="token")
        answer = page.goto(app.url + "/")
        assert answer is not None and "default-src 'self'" in answer.headers[
            "content-security-policy"]
        card = page.locator('.card[data-sku="sku-1"]')  # (a refused inline style says so)
        page.fill("#user-name", "ivan")
        card.locator(".buy").click()  # shop.js runs: it is the page's own script
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card.locator(".stock")).to_have_text("3")
        page.goto(app.url + "/admin")
        expect(page.locator("#a-units_sold")).to_have_text("1")  # admin.js runs too
    assert refused == []


@contextlib.contextmanager
def shop_on_its_own_redis(page) -> Iterator[tuple[object, object]]:
    """The storefront open on a shop whose Redis is ours to stop or freeze: (server,
    sku-1's card), the card showing its 5 units and no "Not selling" banner."""
    from playwright.sync_api import expect

    from lockcore.embedded import RedisServer

    server = RedisServer().start()
    try:
        with ServedApp(workers=1, redis_url=server.url) as app:
            reset_sale(app, "sku-1", stock=5, strategy="token")
            page.goto(app.url + "/")
            card = page.locator('.card[data-sku="sku-1"]')
            expect(card.locator(".stock")).to_have_text("5")
            expect(page.locator("#degraded")).to_be_hidden()
            yield server, card
    finally:
        server.cleanup()


def test_a_redis_outage_is_named_on_the_page_and_in_the_buyers_answer(page):
    # the products come from the database, so the page looked normal while every
    # purchase failed with a bare "Too busy" (the shop's own reason was dropped)
    from playwright.sync_api import expect

    with shop_on_its_own_redis(page) as (server, card):
        server.stop()
        expect(page.locator("#degraded")).to_contain_text("Not selling: redis down",
                                                          timeout=10_000)
        # the shop itself stops answering: its last health answer is old news (a UI
        # audit saw both banners at once)
        for route in ("**/healthz", "**/api/products"):
            page.route(route, lambda route: route.abort())
        expect(page.locator("#offline")).to_be_visible(timeout=5_000)
        expect(page.locator("#degraded")).to_be_hidden(timeout=5_000)
        for route in ("**/healthz", "**/api/products"):
            page.unroute(route)
        expect(page.locator("#degraded")).to_contain_text("Not selling: redis down",
                                                          timeout=10_000)
        page.fill("#user-name", "alice")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Not sold: redis")
        said = card.locator(".message").inner_text()
        assert said.count("try again") == 1, said  # the shop's reason says it already
        server.start()
        expect(page.locator("#degraded")).to_be_hidden(timeout=10_000)


def test_a_frozen_redis_is_named_on_the_page_within_seconds(page):
    # a frozen Redis (SIGSTOP) made every products poll wait out the shop's Redis
    # timeout and then answer 200 from the database; /healthz was only asked after a
    # poll, so the page said nothing for half a minute while every purchase hung
    from playwright.sync_api import expect

    with shop_on_its_own_redis(page) as (server, _):
        server.pause()
        try:
            expect(page.locator("#degraded")).to_contain_text("Not selling: redis",
                                                              timeout=8_000)
        finally:
            server.resume()
        expect(page.locator("#degraded")).to_be_hidden(timeout=15_000)


def test_units_taken_whose_orders_are_not_written_yet_show_as_in_checkout(page):
    # left (Redis) + sold (orders written) fell short of the stock mid-sale, unexplained;
    # the products answer is rewritten here to what a poll sees mid-sale
    import json

    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=10, strategy="token")
        mid_sale = {"stock": 6, "sold": 3, "in_checkout": 1}

        def as_mid_sale(route):
            products = route.fetch().json()
            for product in products:
                if product["sku"] == "sku-1":
                    product.update(mid_sale)
            route.fulfill(status=200, content_type="application/json",
                          body=json.dumps(products))

        page.route("**/api/products", as_mid_sale)
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".checkout")).to_be_visible()
        expect(card.locator(".stock-line")).to_contain_text("6 of 10 left · 3 sold · 1 in checkout")
        mid_sale.update(stock=6, sold=4, in_checkout=0)  # the order is written
        expect(card.locator(".checkout")).to_be_hidden()
        mid_sale.update(stock=0, sold=12)  # an unsafe lock oversold: nothing is in checkout
        expect(card.locator(".sold")).to_have_text("12")
        expect(card.locator(".checkout")).to_be_hidden()

        # the admin page's audit amid the sale: "consistent: false" in red was a false
        # alarm while units were in checkout (an API audit)
        audit_mid_sale = {"remaining": 6, "units_sold": 3, "in_checkout": 1,
                          "consistent": False}

        def audit_as_mid_sale(route):
            route.fulfill(status=200, content_type="application/json",
                          body=json.dumps(route.fetch().json() | audit_mid_sale))

        page.route("**/api/sales/sku-1/audit", audit_as_mid_sale)
        page.clock.install()  # time flows; fast_forward below jumps it
        page.goto(app.url + "/admin")
        consistent = page.locator("#a-consistent")
        expect(page.locator("#a-in_checkout")).to_have_text("1")
        expect(consistent).to_have_text("not yet (units in checkout)")
        expect(consistent).to_have_class(re.compile(r"\bpending\b"))
        expect(consistent).not_to_have_class(re.compile(r"\b(good|bad)\b"))
        audit_mid_sale.update(oversold=1)  # units in checkout beside an oversell: wrong
        expect(consistent).to_have_text("false")
        expect(consistent).to_have_class(re.compile(r"\bbad\b"))
        # figures that do not add up with the units in checkout: wrong (a review)
        audit_mid_sale.update(oversold=0, remaining=7)
        expect(consistent).to_have_text("false")
        audit_mid_sale.update(remaining=6)
        expect(consistent).to_have_text("not yet (units in checkout)")
        # the same unit "in checkout" for longer than a purchase takes (the storefront's
        # "no answer" wait) is a unit lost (a review)
        timeout_s = int(page.locator(".audit").get_attribute("data-purchase-timeout-s"))
        assert timeout_s > 20  # past the longest simulated work (10 s) and a write
        page.clock.fast_forward((timeout_s - 5) * 1000)
        page.wait_for_timeout(1_000)  # polls at the figures, time still short of it
        expect(consistent).to_have_text("not yet (units in checkout)")
        page.clock.fast_forward(10_000)
        # and the shop puts them back on sale soon after (webapp/checkoutwatch.py)
        expect(consistent).to_have_text(
            "false (units stuck in checkout: the shop reloads the sale shortly)")
        expect(consistent).to_have_class(re.compile(r"\bbad\b"))
        # written meanwhile; then a new sale's first buyer with the same figures starts
        # the count again: it was "false" at once (a review)
        audit_mid_sale.update(in_checkout=0, remaining=7, consistent=True)
        expect(consistent).to_have_text("true")
        audit_mid_sale.update(in_checkout=1, remaining=6, consistent=False)
        expect(consistent).to_have_text("not yet (units in checkout)")
        audit_mid_sale.update(oversold=0, in_checkout=0, remaining=7, consistent=True)
        expect(consistent).to_have_text("true")
        expect(consistent).to_have_class(re.compile(r"\bgood\b"))
        expect(consistent).not_to_have_class(re.compile(r"\bpending\b"))


def test_the_admin_page_says_why_there_is_no_audit_and_drops_an_old_reset_message(page):
    # the audit showed bare dashes for an unknown sku or a backend down; and "Reset
    # sku-1: ..." stayed under a form already changed for the next reset
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        page.goto(app.url + "/admin")
        expect(page.locator("#a-consistent")).to_have_text("true")
        expect(page.locator("#audit-message")).to_have_text("")
        page.fill("#sku", "no-such-sku")
        expect(page.locator("#audit-message")).to_contain_text("No audit of no-such-sku: ")
        expect(page.locator("#a-consistent")).to_have_text("-")
        # a dash is neither good nor bad: it kept the last audit's green (a UI audit)
        expect(page.locator("#a-consistent")).not_to_have_class(re.compile(r"\b(good|bad)\b"))
        page.fill("#sku", "  ")  # it asked for the audit of "": "No audit of : The ..."
        expect(page.locator("#audit-message")).to_have_text(
            "Enter a product's sku to see its audit.")
        expect(page.locator("#a-consistent")).to_have_text("-")
        page.fill("#sku", "sku-1")
        expect(page.locator("#audit-message")).to_have_text("")

        page.fill("#token", app.admin_token)
        page.fill("#stock", "4")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_contain_text("Reset sku-1: 4 units")
        page.fill("#stock", "5")
        expect(page.locator("#reset-message")).to_have_text("")
        expect(page.locator("#stock")).to_have_attribute("max", "1000000")


def test_nothing_runs_past_the_edge_of_a_phone_screen(page):
    # at 375 px the buyer hint ran past the right edge (a sideways scroll); a 64-letter
    # name (as long as the shop takes) or sku with no spaces stretched its card to
    # 1176 px, and at 1400 px the confirmation ran across the next two cards
    from playwright.sync_api import expect

    long_name, long_sku = "W" * 64, "Q" * 64
    outside = """() => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
        .map(e => e.tagName + '.' + e.className)"""
    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="atomic")
        page.set_viewport_size({"width": 1400, "height": 800})
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        page.fill("#user-name", long_name)
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text(f"Confirmed! Order #1 for {long_name}")
        ran_past = card.locator(".message").evaluate("m => m.scrollWidth - m.clientWidth")
        assert ran_past <= 0, f"the confirmation ran {ran_past} px past its card"

        page.set_viewport_size({"width": 375, "height": 800})
        for path in ("/", "/admin"):
            page.goto(app.url + path)
            page.wait_for_timeout(600)  # the first poll has filled the numbers in
            if path == "/":
                page.fill("#user-name", "V" * 64)
                card.locator(".buy").click()
                expect(card.locator(".message")).to_contain_text("Confirmed! Order #2 for VVV")
            else:
                page.fill("#sku", long_sku)
                expect(page.locator("#audit-message")).to_contain_text(f"No audit of {long_sku}")
            past = page.evaluate(outside)
            assert past == [], (path, past)
            assert page.evaluate("document.documentElement.scrollWidth") <= 375


def test_a_huge_name_or_description_stays_inside_its_card_at_375_px(page):
    """A name of one grapheme cluster ("Z" and 360 combining marks) made the page scroll
    sideways at 375 px and painted over the next card; a 200-character name and a
    500-character description without spaces made one card 1,225 px tall (a text
    audit). Each is clamped to a few lines, all of it in a title, on the cards the
    server draws and on one shop.js adds."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from webapp import sales

    def tower(length: int) -> str:  # one grapheme cluster as long as the column takes
        return "Z" + "".join(chr(0x300 + i % 0x70) for i in range(length - 1))

    products = {"sku-tower": (tower(200), "marks"), "sku-long": ("N" * 200, "D" * 500),
                "sku-both": (tower(200), tower(500))}
    with ServedApp(workers=1) as app:
        engine = create_engine(app.database_url)
        try:
            for sku, (name, description) in products.items():
                assert sales.create_product(sessionmaker(engine), sku, name, 100, stock=3,
                                            strategy="atomic", description=description)
        finally:
            engine.dispose()
        page.set_viewport_size({"width": 375, "height": 800})
        page.goto(app.url + "/")
        page.wait_for_timeout(600)  # a first poll
        page.evaluate("""() => document.querySelector('.card[data-sku="sku-both"]')
            .remove()""")  # the next poll adds it from shop.js's template
        page.locator('.card[data-sku="sku-both"]').wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        for sku, (name, description) in products.items():
            card = page.locator(f'.card[data-sku="{sku}"]')
            box = card.bounding_box()
            assert box is not None and box["height"] < 560, (sku, box)
            past = card.evaluate("""c => { const r = c.getBoundingClientRect();
                return [...c.querySelectorAll('h2, .description')].filter(e => {
                    const b = e.getBoundingClientRect();
                    return b.right > r.right + 0.5 || b.bottom > r.bottom + 0.5; }).length; }""")
            assert past == 0, sku
            assert card.locator("h2").get_attribute("title") == name
            assert card.locator(".description").get_attribute("title") == description


def test_a_keyboard_shopper_buys_with_enter_keeps_focus_and_hears_the_sell_out(page):
    # the name field ignored Enter; the Buy button, disabled while buying, dropped the
    # focus to <body>; and a sell-out changed only numbers no screen reader is told of
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=2, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".stock")).to_have_text("2")
        for buyer, answer in (("alice", "Confirmed"), ("alice", "already have one")):
            page.fill("#user-name", buyer)
            page.press("#user-name", "Enter")
            expect(card.locator(".buy")).to_be_focused()  # sku-1 is the first card
            page.keyboard.press("Enter")
            expect(card.locator(".message")).to_contain_text(answer)
            expect(card.locator(".buy")).to_be_focused()
        page.fill("#user-name", "bob")
        page.press("#user-name", "Enter")
        page.keyboard.press("Enter")
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(card.locator(".buy")).to_be_disabled()
        expect(page.locator("#user-name")).to_be_focused()  # not <body>
        name = card.locator("h2").inner_text()
        expect(page.locator("#announce")).to_have_text(f"{name} is sold out.")


def test_an_admin_token_with_letters_past_ascii_resets_from_the_page(page):
    # the page sent it as Latin-1 (401 for a token curl could use), and one past U+00FF
    # was refused by the browser ("Network error")
    from playwright.sync_api import expect

    token = "tökén-令牌"
    with ServedApp(workers=1, env={"SECKILL_ADMIN_TOKEN": token}) as app:
        page.goto(app.url + "/admin")
        page.fill("#token", token)
        page.fill("#stock", "7")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_contain_text("Reset sku-1: 7 units")
        page.fill("#token", token + "x")
        page.fill("#stock", "8")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_contain_text("unauthorized")


def test_the_pages_small_courtesies(page):
    # a pages audit: after "Reset sale" by keyboard the focus fell to <body>; the audit's
    # live region was rewritten with the same words every 500 ms (read out again and
    # again); the pages said nothing with JavaScript off; the stock bar slid under
    # prefers-reduced-motion; a buyer's own "sold out" left the Buy button until a poll
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/admin")
        page.fill("#token", app.admin_token)
        page.fill("#sku", "no-such-sku")
        expect(page.locator("#audit-message")).to_contain_text("No audit of no-such-sku")
        page.evaluate("""() => { window.rewrites = 0;
            new MutationObserver(() => window.rewrites++).observe(
                document.getElementById("audit-message"),
                {childList: true, characterData: true, subtree: true}); }""")
        page.wait_for_timeout(2_000)  # four refreshes
        assert page.evaluate("window.rewrites") == 0
        page.fill("#sku", "sku-1")
        page.focus("#reset-form button")
        page.keyboard.press("Enter")
        expect(page.locator("#reset-message")).to_contain_text("Reset sku-1")
        assert page.evaluate("document.activeElement.tagName") == "BUTTON"

        page.emulate_media(reduced_motion="reduce")
        page.goto(app.url + "/")
        assert page.evaluate("getComputedStyle(document.querySelector('.fill'))"
                             ".transitionDuration") == "0s"
        card = page.locator('.card[data-sku="sku-1"]')
        page.route("**/api/products", lambda route: route.abort())  # no poll helps
        page.route("**/purchase", lambda route: route.fulfill(
            status=409, json={"error": "sold_out", "detail": "sku-1 is sold out"}))
        page.fill("#user-name", "ivy")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Sold out")
        expect(card.locator(".buy")).to_be_disabled()
        expect(card.locator(".buy .label")).to_have_text("Sold out")

        # (Playwright's "JavaScript off" still parses <noscript> as a script-on browser
        # does, so its words are looked for in the page as served)
        for path in ("/", "/admin"):
            served = page.request.get(app.url + path).text()
            assert re.search(r"<noscript>.*needs JavaScript.*</noscript>", served, re.S), path


def test_a_shop_answering_503_with_its_database_down_is_not_called_not_answering(page):
    """The shop answered every poll at once, a 503 with its JSON ("the database is
    unavailable"), and the page counted it as no answer: "The shop is not answering"
    beside "Not selling: database down" (a browser audit, PostgreSQL refusing
    connections). The two answers here are the shop's own with its database down: an
    app of this code on a PostgreSQL port that nobody listens on."""
    from playwright.sync_api import expect

    from lockcore.embedded import free_port
    from tests.webapp.conftest import backends, make_app

    with ServedApp(workers=1) as app:
        down = make_app(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing",
                        app.redis_url)
        try:
            client, polls = down.test_client(), []

            def as_the_shop_answers(route):
                answer = client.get(route.request.url.removeprefix(app.url))
                if "/api/products" in route.request.url:
                    polls.append(answer.status_code)
                route.fulfill(status=answer.status_code, headers=dict(answer.headers),
                              body=answer.get_data())

            page.goto(app.url + "/")
            for path in ("**/api/products", "**/healthz"):
                page.route(path, as_the_shop_answers)
            expect(page.locator("#degraded")).to_contain_text("Not selling: database down")
            while len(polls) < 6:  # the page counts three unanswered polls as "not answering"
                page.wait_for_timeout(100)
            assert set(polls) == {503}
            expect(page.locator("#offline")).to_be_hidden()
            expect(page.locator("#degraded")).to_be_visible()
        finally:
            backends(down).close()

        # a proxy's 502 in JSON (deploy/nginx.conf) says the shop is not answering
        for path in ("**/api/products", "**/healthz"):
            page.unroute(path)
        page.route("**/api/products", lambda route: route.fulfill(
            status=502, json={"error": "bad_gateway",
                              "detail": "the shop is not answering, try again shortly"}))
        expect(page.locator("#offline")).to_be_visible(timeout=5_000)


#: (an init script) the page's fetches, with the page's clock, in ``window.asked``;
#: ``document.hidden`` is ``window.hideTab``'s to set (a headless page is never hidden)
RECORD_FETCHES = """
window.asked = [];
window.tabHidden = false;
Object.defineProperty(Document.prototype, "hidden", {get: () => window.tabHidden});
window.hideTab = (hidden) => {
    window.tabHidden = hidden;
    document.dispatchEvent(new Event("visibilitychange"));
};
const fetchAsIs = window.fetch;
window.fetch = (url, ...rest) => {
    window.asked.push([String(url), Date.now()]);
    return fetchAsIs(url, ...rest);
};
"""


def health_checks_in(page, seconds: int) -> list[float]:
    """When the page asked ``/healthz`` in ``seconds`` of its (fake) clock, moved on in
    steps, each fetch let through before the next (the timers after it are set then)."""
    page.evaluate("window.asked = []")
    for _ in range(2 * seconds):
        page.clock.run_for(500)
        page.wait_for_timeout(30)
    return [at for url, at in page.evaluate("window.asked") if url.endswith("/healthz")]


def test_health_checks_slow_down_with_jitter_in_a_hidden_tab_and_while_the_shop_is_away(page):
    """Every open storefront asked /healthz every 2 s on the dot, in a hidden tab and
    while the shop was not answering too (all pages together as it came back), while
    the product polls slowed down, with jitter (a browser audit: 30 checks a minute in
    a hidden tab). Once the shop answers again, what is down is asked at once."""
    import itertools

    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        page.add_init_script(RECORD_FETCHES)
        page.clock.install()
        page.goto(app.url + "/")
        expect(page.locator(".card").first).to_be_visible()
        in_view = health_checks_in(page, 10)
        assert 4 <= len(in_view) <= 7, in_view  # every 2 s, give or take a fifth

        page.evaluate("hideTab(true)")
        hidden = health_checks_in(page, 60)
        assert len(hidden) <= 4, hidden  # every 20 s, give or take a fifth
        gaps = [later - earlier for earlier, later in itertools.pairwise(hidden)]
        assert len(set(gaps)) == len(gaps), gaps  # jitter: no two pages stay in step

        page.evaluate("hideTab(false)")
        for path in ("**/api/products", "**/healthz"):
            page.route(path, lambda route: route.abort())
        health_checks_in(page, 10)
        expect(page.locator("#offline")).to_be_visible()
        away = health_checks_in(page, 60)
        assert len(away) <= 10, away  # every 8 s, give or take a fifth
        for path in ("**/api/products", "**/healthz"):
            page.unroute(path)
        page.evaluate("window.asked = []")
        while page.locator("#offline").is_visible():
            page.clock.run_for(100)
            page.wait_for_timeout(30)
        asked = page.evaluate("window.asked")
        answered_at = [at for url, at in asked if url.endswith("/api/products")][-1]
        assert [url for url, at in asked if at >= answered_at][-1].endswith("/healthz"), asked


def test_the_admin_page_sends_the_sku_as_typed_and_shows_a_long_one_bounded(page):
    """The admin page trimmed the sku: the product ' pg space ' (buyable from the
    storefront) could not be reset or audited there ("unknown_sku"); and a
    3,000-character sku was printed in full twice (a text audit)."""
    from playwright.sync_api import expect
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from webapp import sales

    spaced = " pg space "
    with ServedApp(workers=1) as app:
        engine = create_engine(app.database_url)
        try:
            assert sales.create_product(sessionmaker(engine), spaced, "Spaced", 100,
                                        stock=4, strategy="atomic")
        finally:
            engine.dispose()
        page.goto(app.url + "/admin")
        page.fill("#token", app.admin_token)
        page.fill("#sku", spaced)
        expect(page.locator("#a-strategy")).to_have_text("atomic")
        expect(page.locator("#a-initial_stock")).to_have_text("4")
        expect(page.locator("#stock")).to_have_value("4")
        page.fill("#stock", "6")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text(
            f"Reset {spaced}: 6 units, strategy atomic, work 0 ms, no limit.")
        expect(page.locator("#a-initial_stock")).to_have_text("6")

        page.fill("#sku", "S" * 3000)
        expect(page.locator("#audit-message")).to_contain_text("No audit of SSS")
        assert page.locator("#audit-sku").text_content() == "S" * 64 + "…"
        assert len(page.locator("#audit-message").text_content()) < 200
        page.fill("#sku", "   ")  # spaces only: no product, asked for none
        expect(page.locator("#audit-message")).to_have_text(
            "Enter a product's sku to see its audit.")
        # nor reset: it sent PUT /api/admin/sales/, werkzeug's "URL not found" (a UI audit)
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text("Enter a product's sku first.")


def test_a_reset_from_the_admin_page_keeps_what_the_admin_did_not_change(page):
    """The form always said token, 100 units, no work and sent no limit: "Reset sku-3:
    20 units" from the page switched a sql sale with a limit of 3 to token with no limit
    (a browser audit). It is filled from the sale, on load and for each sku typed; what
    the admin changes stays changed."""
    from playwright.sync_api import expect

    from tests.webapp.served import call

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-3", stock=20, strategy="sql", limit=3, work_ms=5)
        reset_sale(app, "sku-2", stock=8, strategy="atomic")
        page.goto(app.url + "/admin")
        page.fill("#token", app.admin_token)
        page.fill("#sku", "sku-3")
        expect(page.locator("#strategy")).to_have_value("sql")
        expect(page.locator("#limit")).to_have_value("3")
        expect(page.locator("#work-ms")).to_have_value("5")
        expect(page.locator("#stock")).to_have_value("20")
        page.fill("#stock", "12")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text(
            "Reset sku-3: 12 units, strategy sql, work 5 ms, 3 per buyer.")
        _, sale = call(f"{app.url}/api/products/sku-3")
        assert (sale["strategy"], sale["limit"], sale["work_ms"]) == ("sql", 3, 5)

        page.fill("#sku", "sku-2")  # no limit: the field is empty, and none is sent
        expect(page.locator("#strategy")).to_have_value("atomic")
        expect(page.locator("#limit")).to_have_value("")
        expect(page.locator("#stock")).to_have_value("8")
        page.fill("#limit", "2")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text(
            "Reset sku-2: 8 units, strategy atomic, work 0 ms, 2 per buyer.")
        page.fill("#limit", "")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_contain_text("work 0 ms, no limit.")

        def late(route):  # sku-3's values come after the click
            reply = route.fetch()
            page.wait_for_timeout(1_000)
            route.fulfill(response=reply)

        page.route("**/api/products/sku-3", late)
        page.fill("#sku", "sku-3")  # and at once Reset: it waits for sku-3's values
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text(
            "Reset sku-3: 12 units, strategy sql, work 5 ms, 3 per buyer.")


def test_a_message_ends_its_sentence_once_and_says_when_once(page):
    """The admin's audit message added a full stop to a detail that ended in one ("...
    and try again.."), and a buyer of a held-off sale read "(in about 10 s); try again
    (in 10s)." (a browser audit). The held-off answer is section.py's, as the shop
    sends it after Redis lost a sale whose lock holder may still be at work."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        werkzeugs = ("The requested URL was not found on the server. If you entered the URL "
                     "manually please check your spelling and try again.")
        page.route("**/audit", lambda route: route.fulfill(
            status=404, json={"error": "not_found", "detail": werkzeugs}))
        page.goto(app.url + "/admin")
        page.fill("#sku", "sku-1")
        expect(page.locator("#audit-message")).to_contain_text("try again")
        said = page.locator("#audit-message").inner_text()
        assert said.endswith("try again.") and not said.endswith(".."), said
        page.unroute("**/audit")
        # a sku of dots only never reaches the shop as itself (/api/sales/../audit is
        # /api/audit): that 404 was the page's message; the page says what is wrong
        page.fill("#sku", "..")
        expect(page.locator("#audit-message")).to_have_text("No product has a sku of dots only.")
        page.fill("#token", app.admin_token)
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text("No product has a sku of dots only.")

        held_off = ("Redis restarted: sku-1 sells again once a lock holder from before it "
                    "is done (in about 10 s); try again")
        page.route("**/purchase", lambda route: route.fulfill(
            status=503, headers={"Retry-After": "10"},
            json={"error": "busy", "detail": held_off}))
        page.goto(app.url + "/")
        page.fill("#user-name", "ida")
        card = page.locator('.card[data-sku="sku-1"]')
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text(f"Not sold: {held_off}.")

        # the shop's 400 names its field; the buyer typed a name (a browser audit)
        page.unroute("**/purchase")
        page.fill("#user-name", "ida\u200b")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text(
            "Your name contains characters that are not allowed.")


def test_an_oversold_sale_says_so_on_its_card_with_the_audits_number(page):
    """A naive sale of 100 under 1000 buyers showed "26 of 100 left · 1000 sold" and a
    Buy now button, and nothing else: only the admin page said 900 were oversold (a
    storefront audit, watching a showdown). The card says it, with the audit's number."""
    from playwright.sync_api import expect

    from tests.webapp.served import audit, stampede

    # two workers, as tests/webapp/test_served.py oversells naive: one worker's
    # greenlets did not overlap reliably enough for the race to show
    with ServedApp(workers=2) as app:
        reset_sale(app, "sku-1", stock=5, strategy="naive", work_ms=30)
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".oversold")).to_be_hidden()
        for _ in range(3):  # the race's to show: beside a busy suite one stampede of 60
            # sometimes sold exactly (twice in earlier sessions' runs)
            stampede(app, "sku-1", 60, threads=30)
            result = audit(app, "sku-1")
            if result["oversold"] > 0:
                break
            reset_sale(app, "sku-1", stock=5, strategy="naive", work_ms=30)
        assert result["oversold"] > 0, result  # naive oversells, as taught
        expect(card.locator(".sold")).to_have_text(str(result["units_sold"]))
        expect(card.locator(".oversold")).to_have_text(
            f"Oversold by {result['oversold']}: orders for {result['units_sold']} units, "
            "only 5 in stock.")

        reset_sale(app, "sku-1", stock=5, strategy="token")  # a new sale: the line goes
        expect(card.locator(".sold")).to_have_text("0")
        expect(card.locator(".oversold")).to_be_hidden()


def test_a_wrong_admin_token_is_called_that_on_the_admin_page(page):
    """A mistyped token in the admin page's own "Admin token" field was answered with
    the API's words for curl users, "unauthorized: send Authorization: Bearer <the
    admin token>", a header the page itself sends (a storefront audit)."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        page.goto(app.url + "/admin")
        page.fill("#token", app.admin_token + "x")
        page.click("#reset-form button")
        expect(page.locator("#reset-message")).to_have_text(
            "Wrong admin token (unauthorized): use the one seckill serve printed.")
        expect(page.locator("#reset-message")).to_have_class("message error")


@contextlib.contextmanager
def frozen_workers(master: int) -> Iterator[None]:
    """The shop's gunicorn workers stopped (SIGSTOP), as a frozen or paused machine is:
    the kernel still takes connections, and nothing answers them."""
    import signal

    with open(f"/proc/{master}/task/{master}/children") as listing:
        workers = [int(pid) for pid in listing.read().split()]
    assert workers, f"gunicorn {master} has no workers"
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)


def test_the_admin_page_says_so_when_its_audit_has_no_answer(page):
    """The live audit was asked with no time limit: a shop that took the connection and
    never answered (its worker frozen) left "consistent true" up, with no word, for as
    long as it lasted, and a frozen Redis for the shop's 10 s Redis timeout, while the
    storefront named it within seconds (a browser audit). Past 3 s the page says the
    numbers may be old; an answer that comes later is still shown."""
    from playwright.sync_api import expect

    from lockcore.embedded import RedisServer

    server = RedisServer().start()
    try:
        with ServedApp(workers=1, redis_url=server.url) as app:
            page.goto(app.url + "/admin")
            expect(page.locator("#a-consistent")).to_have_text("true")
            expect(page.locator("#audit-message")).to_have_text("")
            with frozen_workers(app.pid):
                expect(page.locator("#audit-message")).to_have_text(
                    "The shop is not answering the audit: the numbers shown may be out of "
                    "date.", timeout=6_000)
                expect(page.locator("#a-consistent")).to_have_text("true")  # kept, marked
                # and no longer green: "true" stayed green through a Redis outage
                expect(page.locator("#a-consistent")).to_have_class(re.compile(r"\bpending\b"))
                expect(page.locator("#a-consistent")).not_to_have_class(re.compile(r"\bgood\b"))
            expect(page.locator("#audit-message")).to_have_text("", timeout=10_000)
            expect(page.locator("#a-consistent")).to_have_class(re.compile(r"\bgood\b"))
            expect(page.locator("#a-consistent")).not_to_have_class(re.compile(r"\bpending\b"))

            server.pause()
            try:
                expect(page.locator("#audit-message")).to_contain_text("not answering",
                                                                       timeout=6_000)
                # the shop's own answer, after its Redis timeout, is shown when it comes
                expect(page.locator("#audit-message")).to_contain_text(
                    "No audit of sku-1: redis", timeout=15_000)
            finally:
                server.resume()
            expect(page.locator("#audit-message")).to_have_text("", timeout=15_000)
    finally:
        server.cleanup()


def test_the_admin_page_asks_for_its_audit_less_often_in_a_hidden_tab(page):
    """It asked twice a second in a tab nobody looked at, where the storefront slows
    to every 5 s (a browser audit); back in view, it asks at once."""
    import time

    with ServedApp(workers=1) as app:
        asked: list[float] = []
        page.on("request", lambda r: asked.append(time.monotonic())
                if r.url.endswith("/api/sales/sku-1/audit") else None)
        page.goto(app.url + "/admin")
        page.wait_for_timeout(2_000)
        assert len(asked) >= 2, asked  # watched: about four in 2 s
        page.evaluate("""() => {
            Object.defineProperty(document, "hidden", {value: true, configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }""")
        page.wait_for_timeout(1_000)  # the audit asked before it was hidden, and its next
        hidden_from = len(asked)
        page.wait_for_timeout(3_000)
        assert len(asked) - hidden_from <= 1, asked
        page.evaluate("""() => {
            Object.defineProperty(document, "hidden", {value: false, configurable: true});
            document.dispatchEvent(new Event("visibilitychange"));
        }""")
        shown_at, before = time.monotonic(), len(asked)
        page.wait_for_timeout(3_000)  # at once, or after one in flight: not 5 s later
        assert len(asked) > before and asked[before] - shown_at < 2.0, asked


def test_a_busy_answer_stays_through_a_reset_the_page_sees_and_then_goes(page):
    """A purchase answered 503 "the sale ... was reset since this purchase looked it
    up; try again", and the next poll, seeing the reset's new sale, cleared it within
    half a second; one from a Redis outage stayed on after the shop was back (a browser
    audit). A busy answer stays ``BUSY_NEWS_MS`` (8 s), then goes."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".stock")).to_have_text("5")
        said = "the sale of sku-1 was reset since this purchase looked it up; try again"
        page.route("**/api/products/sku-1/purchase", lambda route: route.fulfill(
            status=503, headers={"Retry-After": "1"},
            json={"error": "busy", "detail": said}))
        page.fill("#user-name", "dave")
        shown = page.evaluate("Date.now()")  # before: the elapsed time only grows
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text(f"Not sold: {said} (in 1s).")
        reset_sale(app, "sku-1", stock=7, strategy="token")
        expect(card.locator(".initial")).to_have_text("7")  # a poll saw the new sale
        page.wait_for_timeout(600)
        expect(card.locator(".message")).to_have_text(f"Not sold: {said} (in 1s).")
        expect(card.locator(".message")).to_have_text("", timeout=12_000)
        assert page.evaluate("Date.now()") - shown >= 7_500


def test_a_reload_mid_purchase_keeps_the_name_and_the_purchase_its_key(page):
    """A reload while a purchase had no answer lost the name typed and the purchase's
    Idempotency-Key: the purchase had gone through, and buying again said "You already
    have one" with no order number (a browser audit). The tab keeps both."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        made: list[int] = []

        def made_then_lost(route):
            made.append(route.fetch().status)  # the shop made the order; the tab reloads
            route.abort()

        page.route("**/purchase", made_then_lost)
        page.fill("#user-name", "jack")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Network error")
        assert made == [201]
        page.unroute("**/purchase")
        page.reload()
        expect(page.locator("#user-name")).to_have_value("jack")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed! Order #")
        expect(card.locator(".stock")).to_have_text("4")


def test_the_page_takes_back_a_network_error_and_says_a_sale_is_on_again(page):
    """"Network error" stayed on the card after the shop was back; a sale that reopened
    (a reset) was never said, the live region keeping "sold out" (a storefront audit)."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=1, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        expect(card.locator(".stock")).to_have_text("1")
        page.route("**/purchase", lambda route: route.abort())
        page.fill("#user-name", "kim")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Network error")
        expect(card.locator(".message")).to_have_text("", timeout=10_000)  # polls get through
        page.unroute("**/purchase")
        name = card.locator("h2").inner_text()
        reset_sale(app, "sku-1", stock=0, strategy="token")
        expect(page.locator("#announce")).to_have_text(f"{name} is sold out.")
        reset_sale(app, "sku-1", stock=3, strategy="token")
        expect(page.locator("#announce")).to_have_text(f"{name} is on sale again: 3 left.")


def test_a_name_the_shop_cannot_take_marks_the_field(page):
    """Only the empty name moved the focus, and neither marked the field invalid (a
    storefront audit)."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=3, strategy="token")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        name = page.locator("#user-name")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text("Enter your name first.")
        expect(name).to_have_attribute("aria-invalid", "true")
        expect(name).to_be_focused()
        page.fill("#user-name", "zoe\u200b")  # a zero-width space: the shop refuses it
        expect(name).not_to_have_attribute("aria-invalid", "true")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Your name")
        expect(name).to_have_attribute("aria-invalid", "true")
        expect(name).to_be_focused()


def test_a_name_past_the_basic_plane_is_bought_whole_or_refused_never_cut(page):
    """The field's maxlength="64" counted UTF-16 units, the shop characters: 40 × 😀 was
    cut to 32 and 8 families (👩‍👩‍👧‍👦) to 41 characters ending in a joiner, and the
    order was made for a name the buyer did not type (a text audit)."""
    from playwright.sync_api import expect

    family = "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="atomic")
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        for name in ("\U0001f600" * 40, family * 8, "\U00020000" * 64):
            page.fill("#user-name", name)
            card.locator(".buy").click()
            expect(card.locator(".message")).to_have_text(
                re.compile(r"Confirmed! Order #\d+ for " + re.escape(name) + r"\."))
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        page.fill("#user-name", "\U00020000" * 65)
        card.locator(".buy").click()
        expect(card.locator(".message")).to_have_text(
            "Your name must be at most 64 characters (it has 65).")
        expect(page.locator("#user-name")).to_have_attribute("aria-invalid", "true")
        assert not any("/purchase" in url for url in asked)


def _polls_seen(page, responses: list[str], count: int) -> None:
    """Wait (10 s at most) until the page has fetched ``/api/products`` ``count`` more
    times than it had."""
    want = len(responses) + count
    for _ in range(100):
        if len(responses) >= want:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{len(responses)} polls seen, {want} awaited")


def test_a_poll_that_brings_the_same_numbers_changes_nothing_on_the_page(page):
    """Every poll rewrote every card's numbers and found each card by a selector scan:
    with 1,000 products, 90-180 ms of script and 70-90 ms of layout twice a second (a
    data-at-scale audit). A poll with nothing new now writes nothing (no layout, and
    nothing for assistive technology to re-read); a change still shows."""
    from playwright.sync_api import expect

    with ServedApp(workers=1) as app:
        reset_sale(app, "sku-1", stock=5, strategy="token")
        responses: list[str] = []
        page.on("response", lambda answer: responses.append(answer.url)
                if answer.url.endswith("/api/products") else None)
        page.goto(app.url + "/")
        card = page.locator('.card[data-sku="sku-1"]')
        _polls_seen(page, responses, 2)  # the page's own first renders are done
        page.evaluate("""() => {
            window.seenMutations = [];
            new MutationObserver((records) => records.forEach((r) => window.seenMutations
                .push(`${r.type} ${r.attributeName || ''} ${r.target.className || ''}`)))
              .observe(document.querySelector('.cards'), {subtree: true, childList: true,
                attributes: true, characterData: true});
        }""")
        _polls_seen(page, responses, 3)
        assert page.evaluate("window.seenMutations") == []
        reset_sale(app, "sku-1", stock=4, strategy="token")  # and a change still shows
        expect(card.locator(".stock")).to_have_text("4")
        assert page.evaluate("window.seenMutations.length") > 0
