"""PLACEHOLDER: replaced by the optimizer helper."""


def solve() -> None:
    """Not built yet."""
    raise NotImplementedError
