"""queue control and history: a cancelled job, a regrade's generation (the old result kept until the new one is
committed, then kept among the superseded ones; a failed regrade said), refused uploads (they count against the rate), the instructor's background jobs"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0004'
down_revision = '0003'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('generation', sa.Integer(), nullable=False, server_default='0'))
        batch.add_column(sa.Column('regrade_failed', sa.Text(), nullable=True))
        batch.add_column(sa.Column('cancelled_at', sa.Float(), nullable=True))
    with op.batch_alter_table('results') as batch:
        batch.add_column(sa.Column('generation', sa.Integer(), nullable=False, server_default='0'))
    op.create_table(
        'superseded_results',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('submission_pk', sa.Integer(), sa.ForeignKey('submissions.id'), nullable=False, index=True),
        sa.Column('generation', sa.Integer(), nullable=False),
        sa.Column('document', sa.Text(), nullable=False),
        sa.Column('committed_at', sa.Float(), nullable=False),
        sa.Column('superseded_at', sa.Float(), nullable=False),
    )
    op.create_table(
        'refusals',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('student_pk', sa.Integer(), sa.ForeignKey('students.id'), nullable=False, index=True),
        sa.Column('assignment', sa.String(length=64), nullable=True),
        sa.Column('status', sa.Integer(), nullable=False),
        sa.Column('at', sa.Float(), nullable=False),
    )
    op.create_table(
        'admin_jobs',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('assignment', sa.String(length=64), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('progress', sa.Text(), nullable=False, server_default=''),
        sa.Column('message', sa.Text(), nullable=True),
        sa.Column('started_at', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.Column('finished_at', sa.Float(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table('admin_jobs')
    op.drop_table('refusals')
    op.drop_table('superseded_results')
    with op.batch_alter_table('results') as batch:
        batch.drop_column('generation')
    with op.batch_alter_table('submissions') as batch:
        for column in ('cancelled_at', 'regrade_failed', 'generation'):
            batch.drop_column(column)
