"""The per-layer scheduling problem (`problem`), its ILP (`model`, `backends`), the list schedule
(`heuristic`), the exact branch and bound (`exact`), lower bounds (`bounds`), replay checks (`replay`)
and the cached solve (`solve`)."""
