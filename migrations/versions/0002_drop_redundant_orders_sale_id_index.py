"""orders: drop ix_orders_sale_id, which uq_orders_sale_user's leading column already serves

Every lookup by sale (the audit's totals, a reset's DELETE, the foreign key's checks)
can use the UNIQUE (sale_id, user_id) index, whose first column is sale_id. The second
index only cost each order row one more B-tree insert (docs/performance.md, session 12).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 09:40:00

"""
from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = '0002'
down_revision: str | Sequence[str] | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('orders', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_orders_sale_id'))


def downgrade() -> None:
    with op.batch_alter_table('orders', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_orders_sale_id'), ['sale_id'], unique=False)
