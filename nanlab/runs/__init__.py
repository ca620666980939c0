"""A run on disk: the folder that survives a cluster.

- ``atomic``      writes that a crash or a full disk never leave half done
- ``runlock``     one writer per run folder
- ``checkpoint``  checkpoints saved and kept, loaded with ``weights_only=True``
- ``record``      the run record: manifest, per-step rows, per-layer rows, events
"""
