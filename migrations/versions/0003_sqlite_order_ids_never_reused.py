"""orders: on SQLite, AUTOINCREMENT, so that an order id is never handed out twice

A reset deletes its sale's orders. SQLite's plain INTEGER PRIMARY KEY gives the next
row max(id) + 1, so the new sale's first order got the id of an order the reset had
just deleted, and a receipt quoting "order 1" meant two orders across the reset.
AUTOINCREMENT keeps the highest id ever used (``sqlite_sequence``) and counts on from
it, as PostgreSQL's sequence always did. It costs an order batch's transaction one
more row write (docs/performance.md, session 28). PostgreSQL is left as it is.

The table is rebuilt (SQLite cannot alter a primary key in place); its rows and ids are
copied, and the sequence starts at the highest id copied.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26 04:00:00

"""
from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = '0003'
down_revision: str | Sequence[str] | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild_orders(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    with op.batch_alter_table('orders', recreate='always',
                              table_kwargs={'sqlite_autoincrement': autoincrement}):
        pass


def upgrade() -> None:
    _rebuild_orders(True)


def downgrade() -> None:
    _rebuild_orders(False)
