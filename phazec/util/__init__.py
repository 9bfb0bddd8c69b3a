"""Utilities every floor may use: atomic writes, sealed cache entries, interrupts, progress."""
