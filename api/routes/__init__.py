"""TODO(helper)."""
