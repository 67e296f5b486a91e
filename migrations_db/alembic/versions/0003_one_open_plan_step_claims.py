"""one open plan per (job, operator), plan owners, step claims, events dedup without NULLs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 11:15:00

Before the unique index can exist, operators with several open plans keep only the newest one
open: the older ones are marked failed (their steps expect map versions the newest plan races
with). Events duplicated under the old key (equal control-plane events with a NULL epoch) keep
their first row.
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

OPEN = "status IN ('awaiting_approval', 'planned', 'emitting')"


def upgrade() -> None:
    with op.batch_alter_table('plans') as b:
        b.add_column(sa.Column('owner', sa.String(length=250), nullable=False, server_default=''))
        b.add_column(sa.Column('owner_seen_at', sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE plans SET status = 'failed', reason = 'closed by migration 0003: a newer plan of the same "
        f"operator was open too' WHERE {OPEN} AND EXISTS (SELECT 1 FROM plans p2 WHERE p2.job = plans.job "
        f"AND p2.operator = plans.operator AND p2.{OPEN} AND (p2.created_at > plans.created_at "
        "OR (p2.created_at = plans.created_at AND p2.plan_id > plans.plan_id)))"
    )
    op.create_index('uq_plans_one_open', 'plans', ['job', 'operator'], unique=True,
                    postgresql_where=sa.text(OPEN), sqlite_where=sa.text(OPEN))
    with op.batch_alter_table('plan_steps') as b:
        b.add_column(sa.Column('claimed_by', sa.String(length=300), nullable=True))
        b.add_column(sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('events') as b:
        b.add_column(sa.Column('dedup_epoch', sa.BigInteger(), nullable=False, server_default='-1'))
    op.execute("UPDATE events SET dedup_epoch = COALESCE(epoch, -1)")
    op.execute(
        "DELETE FROM events WHERE EXISTS (SELECT 1 FROM events e2 WHERE e2.job = events.job AND "
        "e2.operator = events.operator AND e2.kind = events.kind AND e2.dedup_epoch = events.dedup_epoch "
        "AND e2.message = events.message AND e2.id < events.id)"
    )
    with op.batch_alter_table('events') as b:
        b.drop_constraint('uq_events_dedup', type_='unique')
        b.create_unique_constraint('uq_events_dedup', ['job', 'operator', 'kind', 'dedup_epoch', 'message'])


def downgrade() -> None:
    with op.batch_alter_table('events') as b:
        b.drop_constraint('uq_events_dedup', type_='unique')
        b.create_unique_constraint('uq_events_dedup', ['job', 'operator', 'kind', 'epoch', 'message'])
        b.drop_column('dedup_epoch')
    with op.batch_alter_table('plan_steps') as b:
        b.drop_column('claimed_at')
        b.drop_column('claimed_by')
    op.drop_index('uq_plans_one_open', table_name='plans', postgresql_where=sa.text(OPEN),
                  sqlite_where=sa.text(OPEN))
    with op.batch_alter_table('plans') as b:
        b.drop_column('owner_seen_at')
        b.drop_column('owner')
