"""device types and release: submissions' asked and graded device types, live workers, results released"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0003'
down_revision = '0002'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('released_at', sa.Float(), nullable=True))
    # an assignment's device is now a device type (a device table key); an mlu one held a card index
    op.execute("UPDATE assignments SET device = NULL WHERE backend = 'mlu'")
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('device_type', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('graded_type', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('graded_device', sa.String(length=64), nullable=True))
    op.create_table(
        'workers',
        sa.Column('name', sa.String(length=160), primary_key=True),
        sa.Column('queue', sa.String(length=128), nullable=False),
        sa.Column('device_type', sa.String(length=64), nullable=False),
        sa.Column('device', sa.String(length=64), nullable=True),
        sa.Column('seen_at', sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('workers')
    with op.batch_alter_table('submissions') as batch:
        for column in ('graded_device', 'graded_type', 'device_type'):
            batch.drop_column(column)
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('released_at')
