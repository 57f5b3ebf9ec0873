"""Simulated sandbox vendors: one seeded vendor simulator, behaviour profiles as data, and the fronts
that speak vendors' wire protocols over it (the Prime-like HTTP API in `prime_api`).

Import the pieces from their modules (`providers.sim.core.simulator`, `providers.sim.core.profile`, ...); this
package imports nothing heavy so that `python -m providers.sim.prime.serve` starts fast.
"""
