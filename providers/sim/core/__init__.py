"""The vendor simulator and what it is made of: clock, pool, draws, profiles, the sandbox shell.

Knows no wire protocol: the fronts in `providers.sim.prime` and `providers.sim.modal` speak those over it.
"""
