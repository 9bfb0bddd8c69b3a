"""Where a search's batches are evaluated: worker processes here (`local`) or Ray tasks (`ray`),
behind one interface (`base`)."""
