"""The page-token key: a random secret, generated once, in the database (issue 21).

Before this revision the key that signs page and plan tokens was derived from the database
URL's user, password and database name when ``PAS_PAGE_TOKEN_KEYS`` was unset. With trust
authentication (no password: the compose default, CI) anybody who knew the user and database
name could mint tokens. From here the key is 32 random bytes stored in ``page_token_keys``,
created by this revision; every replica reads the same keys at start. The newest row signs,
every row verifies (a rotation inserts a new row; docs in ``app/page_tokens.py``).

A small global table (no session): a reference table on Citus (``storage/distribution.py``).
The downgrade drops it; the service of 0005 derives its key again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY_BYTES = 32


def upgrade() -> None:
    keys = op.create_table(
        "page_token_keys",
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column(
            "create_time",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("secret", name=op.f("pk_page_token_keys")),
    )
    op.bulk_insert(keys, [{"secret": secrets.token_bytes(_KEY_BYTES)}])


def downgrade() -> None:
    op.drop_table("page_token_keys")
