"""What evaluations cost, and in which units it is shown.

Owns: the meter of an evaluation's time, energy, carbon and money (``meter``), and the units
and formatting of those amounts (``units``). Imports only the root modules (config, errors).
"""
