"""an index on submissions (status, queue, reported_at, started_at): a status poll's place in the queue (the jobs ahead
and being graded, the recent gradings' times) is read from it alone, never from rows that hold the upload inline"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0008'
down_revision = '0007'

from alembic import op


def upgrade() -> None:
    op.create_index('queue_state', 'submissions', ['status', 'queue', 'reported_at', 'started_at'])


def downgrade() -> None:
    op.drop_index('queue_state', table_name='submissions')
