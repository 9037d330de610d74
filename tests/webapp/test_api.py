"""The HTTP contract, status by status, on SQLite and on PostgreSQL."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import update

import lockcore
from tests.webapp.conftest import SKU, auth, backends, buy, buy_after_holdoff, make_app, reset
from webapp.models import Sale


def test_healthz_reports_redis_and_database_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"redis": "ok", "database": "ok"}


def test_products_list_shows_live_stock_and_strategy(client):
    products = {p["sku"]: p for p in client.get("/api/products").get_json()}
    assert products[SKU]["stock"] == 10
    assert products[SKU]["strategy"] == "token"
    assert products["sku-2"]["strategy"] == "atomic"


def test_a_product_redis_lost_leaves_the_others_live_stock_in_the_list(app, client):
    # one sale without a Redis copy made every product after it show the database's
    # count (a data-at-scale audit: sku " " sorted first); the list reads them all at
    # once now, each on its own
    redis = backends(app).redis
    redis.delete("sale:{sku-1}:stock")  # sku-1 sorts first
    redis.set("sale:{sku-2}:stock", 0)  # sku-2's live count: 0, the database's 1
    listed = {p["sku"]: p for p in client.get("/api/products").get_json()}
    assert listed["sku-1"]["stock"] == 10  # no copy: the database's
    assert (listed["sku-2"]["stock"], listed["sku-2"]["in_checkout"]) == (0, 1)
    assert client.get("/api/products/sku-2").get_json()["stock"] == 0


def test_one_product_has_the_contract_fields(client):
    product = client.get(f"/api/products/{SKU}").get_json()
    assert {"sku", "name", "price", "stock", "sold", "strategy"} <= set(product)
    assert (product["price"], product["stock"], product["sold"]) == (49.0, 10, 0)


def test_an_unknown_sku_is_404_unknown_sku(client):
    for response in (client.get("/api/products/nope"),
                     client.get("/api/sales/nope/audit"),
                     client.post("/api/products/nope/purchase", json={"user_id": "a"})):
        assert response.status_code == 404
        assert response.get_json()["error"] == "unknown_sku"


def test_an_unknown_sku_is_404_whatever_the_body(client):
    """The sku first: a bad body for a product that does not exist is its 404, not the
    body's 400 (a contract audit); a known sku with the same bodies keeps its 400."""
    for body in ({"quantity": "x"}, {}, [1], None):
        for sku, status, error in (("nope", 404, "unknown_sku"),
                                   ("x" * 300, 404, "unknown_sku"),
                                   (SKU, 400, "invalid_request")):
            answer = (client.post(f"/api/products/{sku}/purchase", data="{")
                      if body is None else
                      client.post(f"/api/products/{sku}/purchase", json=body))
            assert (answer.status_code, answer.get_json()["error"]) == (status, error), \
                (sku[:10], body)
    assert client.get("/api/sales/nope/audit").status_code == 404


@pytest.mark.parametrize("body, content_type", [
    (b"{", "application/json"), (b'{"stock": -1, "strategy": "token"}', "application/json"),
    (b'{"stock": 5, "strategy": "quantum"}', "application/json"),
    (b'{"stock": 5, "strategy": "token"}', "text/plain"),
], ids=["not-json", "negative-stock", "unknown-strategy", "text-plain"])
def test_a_bad_reset_of_an_unknown_sku_is_404_after_the_token(client, body, content_type):
    """A reset with the right token, an unknown sku and a bad body was the body's 400,
    where a purchase's is the 404 whatever the body (an API fuzz audit); the token is
    still checked first, and a known sku keeps its 400."""
    for sku, headers, status, error in (("nope", auth(), 404, "unknown_sku"),
                                        ("nope", {}, 401, "unauthorized"),
                                        (SKU, auth(), 400, "invalid_request")):
        answer = client.put(f"/api/admin/sales/{sku}", data=body,
                            headers={"Content-Type": content_type, **headers})
        assert (answer.status_code, answer.get_json()["error"]) == (status, error), sku


def test_the_buyers_of_an_unknown_sku_are_404_whatever_after_says(client):
    for sku, status, error in (("nope", 404, "unknown_sku"), (SKU, 400, "invalid_request")):
        answer = client.get(f"/api/admin/sales/{sku}/buyers?after=a%00b", headers=auth())
        assert (answer.status_code, answer.get_json()["error"]) == (status, error), sku
    assert client.get("/api/admin/sales/nope/buyers?after=a%00b").status_code == 401


def test_a_purchase_creates_an_order_with_a_fencing_token(client):
    response = buy(client, "ann")
    assert response.status_code == 201
    order = response.get_json()
    assert (order["sku"], order["user_id"], order["quantity"]) == (SKU, "ann", 1)
    assert isinstance(order["fencing_token"], int)
    assert client.get(f"/api/products/{SKU}").get_json()["stock"] == 9


def test_a_second_purchase_by_the_same_user_is_409_already_purchased(client):
    assert buy(client, "ann").status_code == 201
    response = buy(client, "ann")
    assert response.status_code == 409
    assert response.get_json()["error"] == "already_purchased"


def test_buying_past_the_stock_is_409_sold_out(client):
    assert buy(client, "ann", sku="sku-2").status_code == 201
    response = buy(client, "bob", sku="sku-2")
    assert response.status_code == 409
    assert response.get_json()["error"] == "sold_out"


def test_the_same_idempotency_key_returns_the_same_order_with_200(client):
    first = buy(client, "ann", key="k-1")
    again = buy(client, "ann", key="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == first.get_json()


def test_an_idempotency_key_reused_by_another_user_is_refused(client):
    assert buy(client, "ann", key="k-1").status_code == 201
    response = buy(client, "bob", key="k-1")
    assert response.status_code == 400
    assert client.get(f"/api/sales/{SKU}/audit").get_json()["consistent"]


def test_a_lock_held_elsewhere_makes_the_buyer_wait_then_503_busy(client, app, redis_client):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    holder = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=10_000)
    assert holder.acquire(blocking=False)
    try:
        response = buy(client, "ann")
    finally:
        holder.release()
    assert response.status_code == 503
    assert response.get_json()["error"] == "busy"
    assert int(response.headers["Retry-After"]) >= 1
    assert buy(client, "ann").status_code == 201  # the failed attempt left no reservation


def test_the_sold_out_flag_answers_without_taking_the_lock(client, app, redis_client):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    redis_client.set("sale:{sku-1}:soldout", 1)
    holder = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=10_000)
    assert holder.acquire(blocking=False)
    try:
        response = buy(client, "ann")
    finally:
        holder.release()
    assert response.status_code == 409  # not 503: the lock was never asked for
    assert response.get_json()["error"] == "sold_out"


def test_the_audit_adds_up_after_some_sales(client):
    for user in ("ann", "bob", "cy"):
        assert buy(client, user).status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert audit == audit | {"initial_stock": 10, "remaining": 7, "orders": 3, "units_sold": 3,
                             "oversold": 0, "duplicate_buyers": 0, "consistent": True}


def test_the_audit_notices_redis_stock_that_disagrees_with_the_orders(client, redis_client):
    assert buy(client, "ann").status_code == 201
    redis_client.set("sale:{sku-1}:stock", 10)  # a lost update looks like this
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["consistent"] is False
    assert audit["in_checkout"] == 0  # Redis above the orders: nothing in checkout


def test_a_stock_key_evicted_alone_is_not_units_in_checkout(app, client, redis_client):
    # the sale's copy stays, its stock key went: read as 0 left, which made every unit
    # "in checkout" and the admin page's verdict "not yet" (a review)
    from webapp import sales

    assert buy(client, "ann").status_code == 201
    redis_client.delete("sale:{sku-1}:stock")
    b = backends(app)
    audit = sales.audit(b.sessions, b.redis, SKU)
    assert (audit["remaining"], audit["in_checkout"], audit["consistent"]) == (0, 0, False)


def test_units_taken_in_redis_whose_orders_are_not_written_yet_are_in_checkout(client,
                                                                               redis_client):
    # amid a sale Redis runs ahead of the orders written: the audit said "consistent:
    # false" and the product "stock + sold" short of the stock, neither saying by what
    # (an API audit)
    assert buy(client, "ann").status_code == 201
    redis_client.decrby("sale:{sku-1}:stock", 2)  # two units taken, their orders not yet
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["units_sold"], audit["in_checkout"],
            audit["consistent"]) == (7, 1, 2, False)
    product = client.get(f"/api/products/{SKU}").get_json()
    assert (product["stock"], product["sold"], product["in_checkout"]) == (7, 1, 2)
    redis_client.incrby("sale:{sku-1}:stock", 2)  # given back (or: written, sold)
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["in_checkout"], audit["consistent"]) == (0, True)
    assert client.get(f"/api/products/{SKU}").get_json()["in_checkout"] == 0


def test_the_audit_notices_a_database_count_that_disagrees_with_redis(app, client):
    # Redis and the orders add up; only the database's own count is off (a lost
    # decrement): "consistent" also means Redis agrees with the database (CONTRACT)
    assert buy(client, "ann").status_code == 201
    with backends(app).sessions.begin() as session:
        session.execute(update(Sale).where(Sale.sku == SKU).values(remaining=10))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["units_sold"], audit["database_remaining"]) == (9, 1, 10)
    assert audit["consistent"] is False
    # the database's own books do not add up: no checkout explains it (a review: the
    # admin page said "not yet" for good)
    assert audit["in_checkout"] == 0


def test_the_audit_counts_oversold_units_not_orders(app, client):
    # every oversell the tests made was of one-unit orders: an audit counting orders
    # past the stock passed them all (a mutation check)
    from webapp.models import Order

    reset(client, stock=10, strategy="token", limit=5)
    assert buy(client, "ann", quantity=4).status_code == 201
    assert buy(client, "bob", quantity=4).status_code == 201
    with backends(app).sessions.begin() as session:  # an order no lock stopped
        sale = session.query(Sale).filter_by(sku=SKU).one()
        session.add(Order(sale_id=sale.id, sku=SKU, user_id="cy", quantity=4,
                          strategy="token"))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["units_sold"], audit["oversold"]) == (3, 12, 2), audit
    assert audit["consistent"] is False


def test_stock_taken_without_an_order_is_inconsistent_though_redis_and_db_agree(app, client):
    # the audit's tests that found books inconsistent made Redis and the database
    # disagree too: "remaining + units_sold == initial_stock" was never what caught it
    from sqlalchemy import delete

    from webapp.models import Order

    assert buy(client, "ann").status_code == 201
    with backends(app).sessions.begin() as session:
        session.execute(delete(Order).where(Order.user_id == "ann"))
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["units_sold"]) == (9, 9, 0)
    assert audit["consistent"] is False, audit


@pytest.mark.parametrize("strategy", ["atomic", "sql", "token"])
def test_a_buyer_of_more_than_is_left_is_sold_out_and_takes_nothing(client, strategy):
    # the crowd tests hit this only when their last buyer happens to ask for too much
    reset(client, stock=3, strategy=strategy, limit=5)
    answer = buy(client, "ann", quantity=5)
    assert (answer.status_code, answer.get_json()["error"]) == (409, "sold_out")
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["units_sold"], audit["oversold"]) == (3, 0, 0), audit
    assert audit["consistent"] is True


@pytest.mark.parametrize("combine", [True, False], ids=["combined", "plain"])
@pytest.mark.parametrize("strategy", ["token", "fair", "naive"])
def test_a_lock_path_takes_the_quantity_bought_from_the_stock(app, client, strategy, combine):
    # the plain section (no LOCK_COMBINE) was only ever asked for one unit: one that
    # set the stock to stock - 1 for any quantity passed every test (a mutation check)
    app.config["LOCK_COMBINE"] = combine
    reset(client, stock=10, strategy=strategy, limit=3)
    assert buy(client, "ann", quantity=3).status_code == 201
    assert buy(client, "bob", quantity=2).status_code == 201
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["database_remaining"], audit["units_sold"]) == (5, 5, 5)
    assert audit["consistent"] is True, audit


def test_the_admin_lists_a_sales_buyers_page_by_page(client, monkeypatch):
    """What the showdown compares with the buyers it told 201, buyer by buyer: counts
    let a lost order and an order no buyer heard of cancel out (a showdown audit)."""
    from webapp import admin

    for user in ("cy", "ann", "bob"):
        assert buy(client, user).status_code == 201
    assert buy(client, "dee", sku="sku-2").status_code == 201  # another sale's
    monkeypatch.setattr(admin, "BUYERS_PAGE", 2)
    page = client.get(f"/api/admin/sales/{SKU}/buyers", headers=auth())
    assert page.status_code == 200 and page.get_json() == {"buyers": ["ann", "bob"],
                                                           "next": "bob"}
    page = client.get(f"/api/admin/sales/{SKU}/buyers?after=bob", headers=auth())
    assert page.get_json() == {"buyers": ["cy"], "next": None}
    for path, headers, status, error in [
            (f"/api/admin/sales/{SKU}/buyers", {}, 401, "unauthorized"),  # who bought
            ("/api/admin/sales/nope/buyers", auth(), 404, "unknown_sku"),
            (f"/api/admin/sales/{SKU}/buyers?after=a%00b", auth(), 400, "invalid_request"),
            (f"/api/admin/sales/{SKU}/buyers?after={'x' * 65}", auth(), 400,
             "invalid_request")]:
        answer = client.get(path, headers=headers)
        assert (answer.status_code, answer.get_json()["error"]) == (status, error), path


def test_an_admin_reset_deletes_orders_and_sets_stock_and_strategy(client):
    assert buy(client, "ann").status_code == 201
    body = reset(client, stock=3, strategy="sql", work_ms=5)
    assert (body["stock"], body["strategy"], body["work_ms"]) == (3, "sql", 5)
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["initial_stock"]) == (0, 3, 3)
    assert buy(client, "ann").status_code == 201  # the reset forgot ann's order


def test_every_strategy_the_shop_offers_can_be_selected_and_sells(client):
    for strategy in client.get("/api/strategies").get_json():
        if strategy in ("redlock", "zookeeper"):
            continue  # these need their own servers; test_served.py covers redlock
        reset(client, stock=2, strategy=strategy)
        assert buy(client, f"buyer-{strategy}").status_code == 201, strategy
        audit = client.get(f"/api/sales/{SKU}/audit").get_json()
        assert (audit["units_sold"], audit["consistent"]) == (1, True), strategy


def test_usable_strategies_leave_out_those_whose_servers_this_shop_lacks(client):
    every = client.get("/api/strategies").get_json()
    usable = client.get("/api/strategies?usable=true").get_json()
    assert {"redlock", "zookeeper"} <= set(every)  # this app has neither server
    assert usable == [name for name in every if name not in ("redlock", "zookeeper")]
    lacking = client.get("/api/strategies?unusable=true").get_json()
    assert lacking == {"redlock": "strategy 'redlock' needs REDLOCK_URLS (five Redis servers)",
                       "zookeeper": "strategy 'zookeeper' needs ZOOKEEPER_HOSTS"}
    # an empty value is a value, whichever other is given: "usable=&unusable=true" was
    # 200, read as unusable alone, while "usable=" alone was 400 (an API fuzz audit)
    for query in ("usable=yes", "unusable=1", "usable=true&unusable=true", "usable=",
                  "usable=&unusable=true", "usable=true&unusable=", "unusable="):
        answer = client.get(f"/api/strategies?{query}")
        assert (answer.status_code, answer.get_json()["error"]) == (400, "invalid_request")


def test_the_admin_page_greys_out_strategies_this_shop_has_no_server_for(client):
    page = client.get("/admin").get_data(as_text=True)
    options = dict(re.findall(r'<option value="([^"]+)"([^>]*)>', page))
    assert "disabled" in options["zookeeper"] and "disabled" in options["redlock"]
    assert "disabled" not in options["token"] and "selected" in options["token"]
    assert "zookeeper (needs ZOOKEEPER_HOSTS)" in page


def test_a_strategy_without_its_servers_is_a_clear_400(client):
    response = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                          json={"stock": 5, "strategy": "zookeeper"})
    assert response.status_code == 400
    assert "ZOOKEEPER_HOSTS" in response.get_json()["detail"]


def test_an_unknown_strategy_is_400_invalid_request(client):
    response = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                          json={"stock": 5, "strategy": "hope"})
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_request"


def test_admin_routes_need_the_right_bearer_token(client):
    body = {"stock": 5, "strategy": "token"}
    for headers in ({}, auth("wrong"), {"Authorization": "Basic abc"}, auth("tökén")):
        response = client.put(f"/api/admin/sales/{SKU}", json=body, headers=headers)
        assert response.status_code == 401
        assert response.get_json()["error"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("token", ["tökén-1", "ключ", "🔑-admin",
                                   # last UTF-8 byte 0xA0 or 0x85 (à = C3 A0, х = D1 85)
                                   "secretà", "ключх"])
def test_a_non_ascii_admin_token_works_as_a_client_sends_it(app, database_url, redis_url,
                                                            token):
    # a client sends the header in UTF-8 and WSGI hands it over decoded as latin-1; it
    # was encoded again as UTF-8 and never matched. Decoded as latin-1, a last byte 0xA0
    # or 0x85 is NBSP or NEL, which str.strip() took for whitespace and cut off
    app = make_app(database_url, redis_url, SECKILL_ADMIN_TOKEN=token)  # sku-1's shop
    try:
        client = app.test_client()
        on_the_wire = f"Bearer {token}".encode().decode("latin-1")
        body = {"stock": 5, "strategy": "token"}
        answer = client.put(f"/api/admin/sales/{SKU}", json=body,
                            headers={"Authorization": on_the_wire})
        assert answer.status_code == 200, answer.get_json()
        wrong = f"Bearer {token}x".encode().decode("latin-1")
        assert client.put(f"/api/admin/sales/{SKU}", json=body,
                          headers={"Authorization": wrong}).status_code == 401
    finally:
        backends(app).close()


@pytest.mark.parametrize("before, after", [("", " "), (" ", ""), ("", "\t"), ("\t", " \t")])
def test_http_whitespace_around_the_admin_token_is_ignored(client, before, after):
    # RFC 9110's OWS (spaces, tabs); only those are stripped (not NBSP: see above)
    header = auth()["Authorization"].replace(" ", f" {before}", 1) + after
    answer = client.put(f"/api/admin/sales/{SKU}", json={"stock": 5, "strategy": "token"},
                        headers={"Authorization": header})
    assert answer.status_code == 200, answer.get_json()


@pytest.mark.parametrize("strategy", ["token", "atomic", "sql"])
def test_a_key_in_flight_for_another_user_is_400_before_any_stock_is_taken(client, app,
                                                                          strategy):
    # ann's purchase with the key is under way (claimed, no order row yet): bob's with
    # the same key took a unit that only the order write's UNIQUE key gave back
    from webapp.keys import SaleKeys

    reset(client, stock=1, strategy=strategy)
    backends(app).redis.hset(SaleKeys(SKU).key_owners, "shared-key", "ann")
    answer = buy(client, "bob", key="shared-key")
    assert answer.status_code == 400, answer.get_json()
    # ann's try may yet make no order: "already used for another purchase" was untrue
    assert "sent first by another buyer in this sale" in answer.get_json()["detail"]
    assert client.get(f"/api/products/{SKU}").get_json()["stock"] == 1
    assert buy(client, "ann", key="shared-key").status_code == 201


def test_a_wrong_method_is_a_json_405(client):
    response = client.delete(f"/api/products/{SKU}")
    assert response.status_code == 405
    assert set(response.get_json()) == {"error", "detail"}


def test_an_unknown_route_is_a_json_404(client):
    response = client.get("/api/nothing/here")
    assert response.status_code == 404
    assert set(response.get_json()) == {"error", "detail"}


@pytest.mark.parametrize("method, path", [
    ("GET", "/api//products"), ("GET", f"/api/products//{SKU}"),
    ("GET", "/api/products//purchase"), ("POST", "/api/products//purchase"),
    ("POST", f"/api//products/{SKU}/purchase"), ("PUT", f"/api/admin//sales/{SKU}"),
])
def test_a_doubled_slash_is_a_json_404_not_a_redirect_page(client, method, path):
    response = client.open(path, method=method, json={"user_id": "ann"})
    assert response.status_code == 404, response.get_data(as_text=True)[:200]
    assert set(response.get_json()) == {"error", "detail"}


def test_the_openapi_document_describes_the_purchase_route(client):
    document = client.get("/api/openapi.json").get_json()
    assert document["openapi"].startswith("3.")
    responses = document["paths"]["/api/products/{sku}/purchase"]["post"]["responses"]
    assert {"201", "200", "400", "404", "409", "503"} <= set(responses)


def test_the_storefront_and_admin_pages_render(client):
    page = client.get("/").get_data(as_text=True)
    assert 'data-sku="sku-1"' in page and "token" in page
    assert "Reset a sale" in client.get("/admin").get_data(as_text=True)


def test_the_storefront_with_its_database_down_is_a_page_that_tries_again(redis_url):
    """A browser showed the API's raw JSON 503 ({"error": "busy", ...}), and stayed on
    it after the database came back (a docs audit): a person gets a page saying why,
    which reloads itself; the API keeps its JSON."""
    from lockcore.embedded import free_port

    down = make_app(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing",
                    redis_url)
    try:
        client = down.test_client()
        answer = client.get("/")
        assert answer.status_code == 503 and answer.mimetype == "text/html"
        assert answer.headers["Retry-After"] == "5"
        page = answer.get_data(as_text=True)
        assert "The database is unavailable, try again shortly." in page, page
        assert '<meta http-equiv="refresh" content="5">' in page
        assert answer.headers["Content-Security-Policy"]  # a page's headers
        api = client.get("/api/products")
        assert api.status_code == 503 and api.get_json()["error"] == "busy"
    finally:
        backends(down).close()


def test_when_every_purchase_slot_stays_taken_a_buyer_gets_503_busy(client, app):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    slots = app.extensions["seckill"].combined_slots  # sku-1 sells with token, combined
    taken = 0
    while slots.acquire(blocking=False):
        taken += 1
    try:
        response = buy(client, "ann")
    finally:
        for _ in range(taken):
            slots.release()
    assert response.status_code == 503 and "Retry-After" in response.headers
    assert buy(client, "ann").status_code == 201


def test_a_failed_order_write_is_503_and_puts_the_unit_back(client, monkeypatch):
    from sqlalchemy.exc import OperationalError

    from webapp import orders, sectionorders

    def broken_insert(*args, **kwargs):
        raise OperationalError("INSERT INTO orders", {}, Exception("database is locked"))

    # a lock section writes through one or the other: combined (the default) or plain
    monkeypatch.setattr(orders, "insert_order", broken_insert)
    monkeypatch.setattr(sectionorders, "insert_batch", broken_insert)
    response = buy(client, "ann")
    assert response.status_code == 503 and response.get_json()["error"] == "busy"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["remaining"], audit["orders"], audit["consistent"]) == (10, 0, True)
    monkeypatch.undo()
    assert buy(client, "ann").status_code == 201


def test_a_unit_given_back_after_a_failed_write_is_sold_again_despite_a_sold_out_flag(
        client, redis_client, monkeypatch):
    """A contract audit's finding (PostgreSQL's timing): a buyer refused at zero while
    the last unit was out set the sold-out flag, the unit came back, and every later
    buyer heard ``sold_out`` with stock 1 on the page."""
    from sqlalchemy.exc import OperationalError

    from webapp import orders
    from webapp.keys import SaleKeys

    reset(client, sku="sku-2", stock=1, strategy="atomic", work_ms=1)  # row via insert_grouped

    def refused_meanwhile_then_broken(*args, **kwargs):
        redis_client.set(SaleKeys("sku-2").soldout, 1)  # bob, refused at stock 0
        raise OperationalError("INSERT INTO orders", {}, Exception("database is locked"))

    monkeypatch.setattr(orders, "insert_grouped", refused_meanwhile_then_broken)
    assert buy(client, "ann", sku="sku-2").status_code == 503
    monkeypatch.undo()
    assert client.get("/api/products/sku-2").get_json()["stock"] == 1
    response = buy(client, "carl", sku="sku-2")
    assert response.status_code == 201, response.get_json()
    assert buy(client, "dora", sku="sku-2").get_json()["error"] == "sold_out"


def test_a_replayed_key_with_another_quantity_is_400(client):
    reset(client, stock=10, strategy="token", limit=3)
    assert buy(client, "ann", quantity=1, key="k-q").status_code == 201
    response = buy(client, "ann", quantity=2, key="k-q")
    assert response.status_code == 400 and "quantity" in response.get_json()["detail"]


@pytest.mark.parametrize("strategy", ["token", "atomic", "sql"])
def test_a_key_spent_on_another_sku_is_400_before_the_sale_is_asked(client, strategy):
    # Found by its order before anything else: without that look the purchase went on,
    # took a unit (only the row's UNIQUE key gave it back) and, of a sale with nothing
    # left, answered 409 sold_out, as if the key were free to use here (a mutation audit)
    reset(client, stock=0, strategy=strategy)
    assert buy(client, "ann", sku="sku-2", key="k-spent").status_code == 201
    response = buy(client, "ann", key="k-spent")
    assert response.status_code == 400, response.get_json()
    assert "already used for another purchase" in response.get_json()["detail"]


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_a_quantity_above_the_sales_limit_is_400_naming_the_limit(client, strategy):
    reset(client, stock=10, strategy=strategy, limit=3)
    response = buy(client, "ann", quantity=4)
    assert response.status_code == 400
    assert response.get_json()["detail"] == "quantity must be between 1 and 3 for this sale"
    assert buy(client, "ann", quantity=3).status_code == 201  # nothing was reserved


@pytest.mark.parametrize("strategy", ["atomic", "token"])
def test_a_quantity_above_a_limit_of_one_says_one_unit(client, strategy):
    reset(client, stock=10, strategy=strategy, limit=1)  # "between 1 and 1" (an API audit)
    response = buy(client, "ann", quantity=2)
    assert response.status_code == 400
    assert response.get_json()["detail"] == "quantity must be 1 for this sale (one unit per buyer)"


def test_after_the_sale_sells_out_a_buyer_hears_already_purchased_not_sold_out(client):
    assert buy(client, "ann", sku="sku-2").status_code == 201
    assert buy(client, "bob", sku="sku-2").get_json()["error"] == "sold_out"
    assert buy(client, "ann", sku="sku-2").get_json()["error"] == "already_purchased"


def test_after_redis_loses_its_data_the_sale_goes_on_from_the_database(app, client,
                                                                       redis_client):
    app.config["LOCK_TTL_MS"] = 300  # the hold-off after the reload: one lock TTL
    assert buy(client, "ann").status_code == 201
    redis_client.flushall()  # our own server: a restart without persistence
    assert buy_after_holdoff(client, "bob").status_code == 201
    assert buy(client, "ann").get_json()["error"] == "already_purchased"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["orders"], audit["remaining"], audit["consistent"]) == (2, 8, True)


def test_a_reset_waits_for_the_sales_lock_and_gives_up_with_503(client, app, redis_client):
    app.config["LOCK_TIMEOUT_S"] = 0.2
    holder = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=10_000)
    assert holder.acquire(blocking=False)  # a buyer inside the critical section
    try:
        response = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                              json={"stock": 5, "strategy": "token"})
    finally:
        holder.release()
    assert response.status_code == 503 and "Retry-After" in response.headers
    assert reset(client, stock=5, strategy="token")["stock"] == 5


def test_the_no_op_endpoint_takes_a_purchase_shaped_post_and_still_answers_a_bare_get(client):
    posted = client.post("/api/noop", json={"user_id": "ann", "quantity": 1})
    assert posted.status_code == 200 and posted.get_json() == {"ok": True}
    assert client.get("/api/noop").get_json() == {}
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert audit["orders"] == 0  # it touched no sale


@pytest.mark.parametrize("path", ["/", "/admin"])
def test_the_html_pages_send_a_content_security_policy(client, path):
    answer = client.get(path)
    assert answer.status_code == 200 and answer.mimetype == "text/html"
    assert "default-src 'self'" in answer.headers["Content-Security-Policy"]
    assert "object-src 'none'" in answer.headers["Content-Security-Policy"]
    assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_a_reset_waits_for_another_reset_of_the_sale_and_gives_up_with_503(client,
                                                                           redis_client):
    # resets of one sale must not interleave: only a crowd test caught it, by chance
    other = lockcore.create("token", redis_client, f"reset:{SKU}", ttl_ms=60_000)
    assert other.acquire(blocking=False)  # another reset of sku-1 is under way
    try:
        response = client.put(f"/api/admin/sales/{SKU}", headers=auth(),
                              json={"stock": 3, "strategy": "atomic"})
    finally:
        other.release()
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["error"] == "busy"
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    assert (audit["initial_stock"], audit["strategy"]) == (10, "token"), audit


@pytest.mark.parametrize("lock_timeout_s", [0.2, 10.0, 30.0])
def test_the_page_waits_for_a_purchase_past_the_shops_worst_case(client, lock_timeout_s):
    """The page's "no answer" comes after the longest a purchase can take: the lock wait,
    or a wait for the buyer's other purchase in flight (10 s) when that is longer, then
    the longest work and the order write. With a short LOCK_TIMEOUT_S the page gave up
    on a purchase still waiting for its twin (a review). The write's term is its whole
    budget (``writedeadline.py``), not one statement's timeout (a PostgreSQL audit)."""
    from webapp.admin import MAX_WORK_MS
    from webapp.writedeadline import ORDER_WRITE_S, SLACK_S

    client.application.config["LOCK_TIMEOUT_S"] = lock_timeout_s
    page = client.get("/").get_data(as_text=True)
    said = float(re.search(r'data-purchase-timeout-s="([\d.]+)"', page).group(1))
    longest = (max(lock_timeout_s, 10.0) + MAX_WORK_MS / 1000 + ORDER_WRITE_S + SLACK_S)
    assert said > longest, (said, longest)
