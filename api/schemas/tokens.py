"""Bearer tokens as admins create and list them."""

from datetime import datetime

from interstice.api.schemas.common import Request, integer
from pydantic import BaseModel, Field

from interstice.wire import TokenRole

Role = TokenRole

TOKEN_NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@\-]+$")
TOKEN_ID = r"^t-[0-9]{1,15}$"


class TokenCreate(Request):
    """A new bearer token.

    Attributes:
        name: who holds it (letters, digits, ``_ . : @ -``).
        role: ``scheduler``, ``agent``, ``user`` or ``admin``.
        expires_in_s: lifetime from now, seconds (at most 10 years); null: it never expires.
    """

    name: str = TOKEN_NAME
    role: Role
    expires_in_s: integer(1, 10 * 366 * 86400) | None = None


class TokenPublic(BaseModel):
    """A token as admins see it (never its secret: only a hash is stored).

    Attributes:
        token_id: ``t-<id>``.
        expires_at: when it stops working, or null (never).
        revoked_at: when it was revoked, or null.
    """

    token_id: str
    name: str
    role: Role
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    """A new token with its secret, shown this once."""

    token: str


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int
