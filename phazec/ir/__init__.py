"""The IR: models of layers, identical layer classes and their operator graphs (`core`, `ops`), the
verifier, the printer, per-layer summaries and graph utilities."""
