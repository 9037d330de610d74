"""The storefront in Debian's Chromium (Playwright): buy, watch the stock fall, sell out."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support import missing_system_part
from tests.webapp.served import reset_sale
from webapp.serve import ServedApp

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"


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
        expect(card.locator(".buy")).to_have_text("Sold out")
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


def test_a_retry_after_a_lost_reply_confirms_the_order_the_shop_made(page):
    # the purchase reaches the shop, its reply is lost: a fresh Idempotency-Key on the
    # retry made it "already purchased"; the same key gets the order back (200)
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
            route.abort()

        page.route("**/purchase", lose_the_first_reply)
        page.fill("#user-name", "frank")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Network error")
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
        page.fill("#user-name", "grace")
        card.locator(".buy").click()
        expect(card.locator(".message")).to_contain_text("Confirmed")
        expect(meter).to_have_attribute("aria-valuenow", "4")

        reset_sale(app, "sku-1", stock=5, strategy="token")
        expect(card.locator(".sold")).to_have_text("0")
        expect(card.locator(".message")).to_have_text("")
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
        expect(late.get_by_role("button", name="Buy Late Lamp")).to_be_enabled()


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
        expect(card.locator(".message")).to_have_text("")


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
        page.clock.run_for(21_000)
        expect(card.locator(".message")).to_contain_text("No answer in 20s")
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


def test_a_redis_outage_is_named_on_the_page_and_in_the_buyers_answer(page):
    # the products come from the database, so the page looked normal while every
    # purchase failed with a bare "Too busy" (the shop's own reason was dropped)
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
            server.stop()
            expect(page.locator("#degraded")).to_contain_text("Not selling: redis down",
                                                              timeout=10_000)
            page.fill("#user-name", "alice")
            card.locator(".buy").click()
            expect(card.locator(".message")).to_contain_text("Not sold: redis")
            expect(card.locator(".message")).to_contain_text("try again in")
            server.start()
            expect(page.locator("#degraded")).to_be_hidden(timeout=10_000)
    finally:
        server.cleanup()
