"""The control loop's stages, one module each, and the typed hand-offs between them.

collect → evaluate (DS2 + guards) → place → plan → emit (ballast.emitter) → verify; ballast.controller
only wires them. `python -m ballast.control` is the on-call's command line for open plans.
"""
