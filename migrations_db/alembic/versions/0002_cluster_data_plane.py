"""cluster data plane: dead letters per epoch/worker, executors and capacity in the heartbeat

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 07:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('worker_metrics') as b:
        b.add_column(sa.Column('dead_letters', sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('epoch_metrics') as b:
        b.add_column(sa.Column('dead_letters', sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('heartbeats') as b:
        b.add_column(sa.Column('executors', sa.Integer(), nullable=True))
        b.add_column(sa.Column('capacity', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('heartbeats') as b:
        b.drop_column('capacity')
        b.drop_column('executors')
    with op.batch_alter_table('epoch_metrics') as b:
        b.drop_column('dead_letters')
    with op.batch_alter_table('worker_metrics') as b:
        b.drop_column('dead_letters')
