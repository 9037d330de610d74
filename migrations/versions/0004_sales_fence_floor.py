"""sales: fence_floor, the fencing counter a reload last raised the sale's lock to

When Redis loses its data, the sale's lock counter goes with it; the reload raises it
past the highest token the sale's orders carry plus a slack for tokens no order shows
(``saleinfo._write_back``). Nothing remembered that fence: tokens handed out after one
reload with no order to show them (a hold-off's 503s, refusals, sections still writing)
were forgotten at the next loss, which computed the same fence again, and later orders
carried tokens below ones already handed out (a fault audit: 2797, then 2398). The
next reload now goes past this one as well.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27 19:45:00

"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = '0004'
down_revision: str | Sequence[str] | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('sales', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fence_floor', sa.BigInteger(), nullable=False,
                                      server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('sales', schema=None) as batch_op:
        batch_op.drop_column('fence_floor')
