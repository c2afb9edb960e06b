"""Bearer tokens as admins create and list them."""

from datetime import datetime

from interstice.api.schemas.common import Request, integer
from pydantic import BaseModel, Field

from interstice import wire
from interstice.wire import TokenRole

Role = TokenRole
MUNGE_SCHEME = wire.MUNGE_SCHEME
"""``Authorization: MUNGE <credential>``: the other way to call the user routes."""

TOKEN_NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@\-]+$")
TOKEN_ID = r"^t-[0-9]{1,15}$"
UNIX_USER = Field(
    default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*\$?$"
)


class TokenCreate(Request):
    """A new bearer token.

    Attributes:
        name: who holds it (letters, digits, ``_ . : @ -``).
        role: ``scheduler``, ``agent``, ``user`` or ``admin``.
        expires_in_s: lifetime from now, seconds (at most 10 years); null: it never expires.
        unix_user: the Unix account a ``user`` (or ``admin``) token acts as: its jobs run as
            that account and it sees that account's jobs, MUNGE-submitted ones included.
            Required for a user token in multi-user mode; null: unbound (single-user mode).
        unix_uid: the account's uid; null: looked up on the service host. Give it when the
            account exists on the nodes only.
    """

    name: str = TOKEN_NAME
    role: Role
    expires_in_s: integer(1, 10 * 366 * 86400) | None = None
    unix_user: str | None = UNIX_USER
    unix_uid: integer(1, 2**32 - 2) | None = None


class TokenPublic(BaseModel):
    """A token as admins see it (never its secret: only a hash is stored).

    Attributes:
        token_id: ``t-<id>``.
        expires_at: when it stops working, or null (never).
        revoked_at: when it was revoked, or null.
        unix_user: the Unix account it is bound to, or null.
        unix_uid: that account's uid, or null.
    """

    token_id: str
    name: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    unix_user: str | None = None
    unix_uid: int | None = None


class TokenCreated(TokenPublic):
    """A new token with its secret, shown this once."""

    token: str


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int
