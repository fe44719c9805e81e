"""course policy: the reference-seed guard's record, late window and penalty, rate limit; late submissions"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0002'
down_revision = '0001'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('seed_checked', sa.String(length=160), nullable=True))
        batch.add_column(sa.Column('seed_failures', sa.Text(), nullable=True))
        batch.add_column(sa.Column('late_until', sa.Float(), nullable=True))
        batch.add_column(sa.Column('late_penalty', sa.Float(), nullable=False, server_default='0'))
        batch.add_column(sa.Column('per_hour', sa.Integer(), nullable=True))
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('late', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('submissions') as batch:
        batch.drop_column('late')
    with op.batch_alter_table('assignments') as batch:
        for column in ('per_hour', 'late_penalty', 'late_until', 'seed_failures', 'seed_checked'):
            batch.drop_column(column)
