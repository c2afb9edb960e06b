"""TODO(helper): package docstring."""
