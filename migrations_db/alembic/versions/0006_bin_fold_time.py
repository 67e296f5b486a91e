"""bin fold time: the time each bin's fold took in an epoch (critical-path-aware placement)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 10:55:00

The worker measures, per bin, the wall time of its fold (the user's Python) in microseconds. When
the workers' folds hold the critical path, placement weighs bins by it instead of by their record
counts (docs/policy.md, "Hot bins on the critical path"). Rows written before this revision read 0.
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('bin_metrics') as batch:
        batch.add_column(sa.Column('fold_us', sa.BigInteger(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('bin_metrics') as batch:
        batch.drop_column('fold_us')
