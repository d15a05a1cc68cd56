"""Stack migration: the compatibility matrix between two stacks (matrix.py) and the A/B decision
rules (ab.py). The `orch migrate run` procedure (to come) uses the run lifecycle of runs/."""
