"""phazec: co-search of training accelerators and distributed training plans."""
