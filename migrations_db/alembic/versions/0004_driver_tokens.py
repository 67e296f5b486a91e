"""driver tokens: one fencing token (ownership epoch) per (job, operator)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 12:50:00

Every driver start bumps its operator's token; its epoch commits, step checkpoints, decision-log
rows and destructive durable-state actions check it in the transaction that writes them, so a
stale driver (paused, partitioned, relaunched over) commits nothing.
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'driver_tokens',
        sa.Column('job', sa.String(length=200), nullable=False),
        sa.Column('operator', sa.String(length=200), nullable=False),
        sa.Column('token', sa.BigInteger(), nullable=False),
        sa.Column('taken_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('pid', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(length=200), nullable=False),
        sa.Column('outage_s', sa.Float(), nullable=False),
        sa.Column('checked_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('job', 'operator'),
    )


def downgrade() -> None:
    op.drop_table('driver_tokens')
