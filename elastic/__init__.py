"""interstice.elastic: the contract for users' own training scripts (being written)."""
