"""the uploads leave the submissions' rows for a table of their own (uploads): SQLite keeps a row's values in one record, so every scan of the submissions (the pages' live refresh, the dashboard, the queue) walked each upload's ~100 KB of overflow pages"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0009'
down_revision = '0008'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    op.create_table(
        'uploads',
        sa.Column('submission_pk', sa.Integer(), nullable=False),
        sa.Column('archive', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['submission_pk'], ['submissions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('submission_pk'),
    )
    op.execute('INSERT INTO uploads (submission_pk, archive) SELECT id, archive FROM submissions')
    with op.batch_alter_table('submissions') as batch:
        batch.drop_column('archive')


def downgrade() -> None:
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('archive', sa.LargeBinary(), nullable=True))
    op.execute('UPDATE submissions SET archive = (SELECT archive FROM uploads WHERE uploads.submission_pk = submissions.id)')
    op.execute("UPDATE submissions SET archive = '' WHERE archive IS NULL")
    with op.batch_alter_table('submissions') as batch:
        batch.alter_column('archive', existing_type=sa.LargeBinary(), nullable=False)
    op.drop_table('uploads')
