"""results no longer keep a rendered report: the server draws it from the document on each fetch, in the viewer's language and the course's zone (views.report_of), so the stored HTML was written by every commit and never read"""
# ruff: noqa: E402, I001 - the layout Alembic generates

revision = '0007'
down_revision = '0006'

import sqlalchemy as sa
from alembic import op


def upgrade() -> None:
    with op.batch_alter_table('results') as batch:
        batch.drop_column('report_html')


def downgrade() -> None:
    # the schema before kept one per result; nothing read it, so an empty one serves the code of that schema
    with op.batch_alter_table('results') as batch:
        batch.add_column(sa.Column('report_html', sa.Text(), nullable=False, server_default=''))
