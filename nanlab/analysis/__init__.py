"""Reading a loss curve.

- ``signals``  spikes, stalls, recovery and final loss, on any loss scale and sign
- ``judge``    one verdict of a run against its clean run: cured, not cured, diverged
"""
