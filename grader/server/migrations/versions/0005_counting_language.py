"""what counts and in which language: an assignment's counting policy, a submission's student-chosen mark and the language its student asked in"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0005'
down_revision = '0004'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('counts', sa.String(length=16), nullable=True))
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('chosen_at', sa.Float(), nullable=True))
        batch.add_column(sa.Column('lang', sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('submissions') as batch:
        for column in ('lang', 'chosen_at'):
            batch.drop_column(column)
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('counts')
