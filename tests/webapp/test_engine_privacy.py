"""A database error's text, which the shop logs, does not carry its statement's
parameters: the buyers' ids and Idempotency-Keys were in every write fault's warning
(an operator audit)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from webapp.extensions import make_engine


def test_a_failed_statement_names_no_parameter(database_url):
    engine = make_engine(database_url)
    try:
        with pytest.raises(DBAPIError) as failed, engine.connect() as connection:
            connection.execute(text("SELECT * FROM no_such_table WHERE user_id = :u"),
                               {"u": "buyer-secret-42"})
        assert "buyer-secret-42" not in str(failed.value), str(failed.value)
    finally:
        engine.dispose()
