"""Published experiments of the field, re-implemented with their conventions term by term."""
