"""Finding the cause: replay the first bad step (``locate``), then the SOP (``diagnose``).

- ``trace``:    the hooks and aten-op tracer that number non-finite tensors in order
- ``locate``:   the first module, pass and tensor that went non-finite, by exact replay
- ``diagnose``: the SOP automated, each step a controlled replay, the fix proven
- ``runs``:     a saved run folder read back, ready to replay

>>> from nanlab.debug import diagnose, locate
>>> callable(diagnose) and callable(locate)
True
"""

from nanlab.debug.diagnose import Diagnosis, Finding, diagnose
from nanlab.debug.locate import Location, locate
from nanlab.debug.runs import load_run

__all__ = ["Diagnosis", "Finding", "Location", "diagnose", "load_run", "locate"]
