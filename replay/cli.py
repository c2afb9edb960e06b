"""PLACEHOLDER: replaced by the replay helper."""


def replay() -> None:
    """Not built yet."""
    raise NotImplementedError
