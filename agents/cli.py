"""PLACEHOLDER: replaced by the agent helper."""


def agent() -> None:
    """Not built yet."""
    raise NotImplementedError
