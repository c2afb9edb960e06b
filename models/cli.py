"""PLACEHOLDER: replaced by the training-side helper."""


def profile() -> None:
    """Not built yet."""
    raise NotImplementedError
