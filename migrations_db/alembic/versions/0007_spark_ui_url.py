"""spark UI url: where the driver's Spark UI answers, in its heartbeat (the console links to it)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 15:00:00

A driver started with its Spark UI on records the UI's address with every heartbeat; null when
the UI is off (the data plane's default) or the row predates this revision.
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('heartbeats') as batch:
        batch.add_column(sa.Column('spark_ui_url', sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('heartbeats') as batch:
        batch.drop_column('spark_ui_url')
