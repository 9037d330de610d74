"""A seeded fuzzer in place of schemathesis: a few hundred random JSON bodies and
headers against the purchase and reset routes. Whatever arrives, the answer is a
documented status with the contract's JSON shape, and the books still balance."""

from __future__ import annotations

import json
import random
import string
from typing import Any

from tests.contract.wire import assert_error

SKU = "qa-strat-4"
ROUNDS = 150
#: what a header may carry (http.client refuses CR, LF and friends before sending)
KEY_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "
ALPHABET = string.printable + "é小🛒\u0000\u0085\u200b\u202e\ud800"


def junk(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, 1, -1, 2, 5, 2**31, 2**63, -(2**63), 10**30])
    if kind == 3:
        return rng.choice([0.0, 1.0, 1.5, -2.5, 1e308, 5e-324])
    if kind in (4, 5):
        return "".join(rng.choice(ALPHABET) for _ in range(rng.choice([0, 1, 5, 64, 65, 300])))
    if kind == 6:
        return [junk(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["user_id", "quantity", "stock", "strategy", "x"]): junk(rng, depth + 1)
            for _ in range(rng.randrange(4))}


def body_for(rng: random.Random) -> Any:
    body = {"user_id": junk(rng), "quantity": junk(rng)}
    if rng.random() < 0.3:
        body["user_id"] = f"fuzz-{rng.randrange(10**6)}"
    if rng.random() < 0.3:
        del body["quantity"]
    return body if rng.random() < 0.9 else junk(rng)


def test_random_purchases_get_documented_answers(shop):
    shop.reset(SKU, 40, "token")
    rng = random.Random(20261121)
    seen = set()
    for _ in range(ROUNDS):
        raw = json.dumps(body_for(rng), ensure_ascii=rng.random() < 0.5)
        headers = {"Content-Type": "application/json"}
        if rng.random() < 0.3:
            headers["Idempotency-Key"] = "".join(
                rng.choice(KEY_ALPHABET) for _ in range(rng.choice([0, 1, 20, 128, 129])))
        answer = shop.call("POST", f"/api/products/{SKU}/purchase",
                           raw=raw.encode("utf-8", "surrogatepass"), headers=headers)
        seen.add(answer.status)
        if answer.status not in (200, 201):
            assert answer.status in (400, 409, 503), (raw[:200], answer.body[:200])
            assert_error(answer, answer.status)
    assert 400 in seen and 201 in seen, seen
    shop.assert_books_balance(SKU)


def test_random_resets_get_documented_answers(shop):
    rng = random.Random(11)
    token = {"Authorization": f"Bearer {shop.admin_token}"}
    for _ in range(ROUNDS // 3):
        body = {"stock": junk(rng), "strategy": rng.choice(["token", "sql", junk(rng)]),
                "work_ms": junk(rng), "limit": junk(rng)}
        for name in list(body):
            if rng.random() < 0.3:
                del body[name]
        answer = shop.call("PUT", f"/api/admin/sales/{SKU}", raw=json.dumps(body).encode(),
                           headers={**token, "Content-Type": "application/json"})
        if answer.status != 200:
            assert_error(answer, 400, "invalid_request")
        shop.assert_books_balance(SKU)
