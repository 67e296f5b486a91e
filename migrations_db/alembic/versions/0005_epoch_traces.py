"""epoch traces: each epoch's activities and messages (critical-path analysis)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 03:50:00

One row per (job, operator, epoch), written by the epoch's tail after its commit and pruned with the
per-epoch metrics; ballast.store.traces reads a window of them for its critical participation and
its Chrome/Perfetto export.
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'epoch_traces',
        sa.Column('job', sa.String(length=200), nullable=False),
        sa.Column('operator', sa.String(length=200), nullable=False),
        sa.Column('epoch', sa.BigInteger(), nullable=False),
        sa.Column('started_us', sa.BigInteger(), nullable=False),
        sa.Column('activities', sa.JSON(), nullable=False),
        sa.Column('messages', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('job', 'operator', 'epoch'),
    )


def downgrade() -> None:
    op.drop_table('epoch_traces')
