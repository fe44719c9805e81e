"""the replay's engine a grading is asked for: a submission's next grading (an instructor's native regrade of a result held for review) and each committed result's, kept with the results it superseded"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0006'
down_revision = '0005'

import sqlalchemy as sa
from alembic import op

TABLES = ('submissions', 'results', 'superseded_results')


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('replay_engine', sa.String(length=16), nullable=True))


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column('replay_engine')
