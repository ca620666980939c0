"""What a notebook's check cells call: run the learner's code, compare, print one clear line.

The first printed line is a stable fact, so nbval can compare it in the solution notebooks:

- ``passed: <name>``                  the answer is right
- ``not done yet: <name>``            the stub still raises ``NotImplementedError``
- ``not yet right: <name>: <what>``   wrong value, or the learner's code raised

``check`` never raises, so an unfilled lab runs top to bottom (CI runs it that way). Each
result goes to the progress file. Hints are revealed one at a time with ``hint(name)``;
they explain the idea and name the API, never the code. The reference code is a separate,
explicit step, ``solution(name)``, noted in the progress file, so a check passed after
it is told apart from one passed alone. A wrong value is described (what was got, where
it differs) without the expected value until the learner has tried ``REVEAL_AFTER`` (3)
times: a first wrong try is not handed the answer.

An exercise judged on several inputs passes them as named ``cases``: the learner's
function runs once per case, on deep copies of its arguments (so code that changes its
inputs in place is judged like any other), and a failure names the case in words
(``case 'all-masked micro-batch': got nan, ...``), a case that raises included.

A prediction is committed before the experiment that tests it runs: ``predict(name,
my_predictions)`` locks the first filled-in answer (in the kernel and in the progress
file), and the later ``check(name, ..., locked=True)`` grades that committed answer, not
one changed after the results were on screen.

Usage in a check cell::

    check("is_finite_report", lambda: is_finite_report(t.clone()),
          {"finite": 2, "inf": 1, "nan": 1},
          hints=["torch.isnan and torch.isinf give boolean masks."],
          solution="return {'finite': int(torch.isfinite(t).sum()), ...}")

    check("first_bad_step", first_bad_step, [2, None],
          cases={"NaN after two losses": ([3.0, 2.0, nan],), "all finite": ([1.0],)})
"""

from __future__ import annotations

import copy
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nanlab.course import progress
from nanlab.course.quiz import REVEAL_AFTER, Hints, _show

PASSED = "passed"
NOT_DONE = "not done yet"
WRONG = "not yet right"

_NOTHING = object()
_hints: dict[str, Hints] = {}
_last_name: str | None = None
_wrong_tries: dict[str, int] = {}
_predictions: dict[tuple[str, str], Any] = {}
_solutions: dict[str, str] = {}
_labs: dict[str, str | None] = {}


@dataclass
class CheckResult:
    """The outcome of one check: ``status`` is one of PASSED, NOT_DONE, WRONG.

    >>> r = CheckResult("first_bad_step", WRONG, "got 3, expected 2")
    >>> r.passed, r.line()
    (False, 'not yet right: first_bad_step: got 3, expected 2')
    """

    name: str
    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def line(self) -> str:
        """The one line a check cell prints first."""
        return f"{self.status}: {self.name}" + (f": {self.detail}" if self.detail else "")


def start_lab(lab: str, *, threads: int | None = 1) -> None:
    """Say which lab this notebook is (results are recorded under it); pin CPU threads.

    The labs run torch on one CPU thread (``threads=1``; None leaves torch's default), so
    a run repeats bit for bit on one machine. Another thread count or processor (AVX2,
    AVX-512, ARM) sums a matrix product in another order, and a run on the edge of
    blowing up (the deep stack of Lab 05, ``high_lr``) fails a few steps earlier or later:
    the labs check mechanisms and ranges that hold on every path, not one machine's step.
    The toy model is too small to gain from more threads.

    >>> start_lab("01_numbers")  # doctest: +SKIP
    """
    progress.set_lab(lab)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def evaluate(
    name: str,
    attempt: Callable[[], Any] | Any,
    expected: Any = _NOTHING,
    *,
    test: Callable[[Any], str | bool | None] | None = None,
    reveal: bool = True,
    cases: Mapping[str, tuple | dict] | None = None,
) -> CheckResult:
    """Run ``attempt`` (a zero-argument callable, or a plain value) and judge it; never raises.

    Give either ``expected`` (compared value by value; tensors, floats, dicts, lists) or
    ``test``, a function of the learner's value returning None or True when right, or a
    string saying what differed. A value of the wrong kind is a WRONG result that says
    what kind was expected. ``reveal=False`` leaves the expected value out of the verdict.

    With ``cases`` ({case in words: its arguments, a tuple or a dict of keywords}),
    ``attempt`` is the function to call once per case, on deep copies of the arguments.
    ``expected`` is then a list (one value per case, in order) or a dict by case, and
    ``test`` gets {case: value}; a failure, or a case that raises, names the case.

    >>> evaluate("two", lambda: 1 + 1, 2).line()
    'passed: two'
    >>> evaluate("two", "2", 2).line()
    "not yet right: two: expected a number, got str '2'"
    >>> evaluate("half", lambda x: x // 2, [1, 2.5], cases={"two": (2,), "five": (5,)}).line()
    "not yet right: half: case 'five': got 2, expected 2.5"
    """
    if (expected is _NOTHING) == (test is None):
        raise TypeError(f"check {name!r}: give exactly one of expected=... or test=...")
    if cases is not None:
        expected = _expected_by_case(name, cases, expected)
        return _evaluate_cases(name, attempt, cases, expected, test, reveal)
    try:
        value = attempt() if callable(attempt) else attempt
    except NotImplementedError:
        return CheckResult(name, NOT_DONE)
    except (Exception, SystemExit) as err:  # the learner's code failed: report it in one line
        return CheckResult(name, WRONG, f"your code raised {_one_line(err)}")
    return CheckResult(name, *_judge(value, expected, test, reveal))


def _judge(value: Any, expected: Any, test: Callable | None, reveal: bool,
           label: str | None = None) -> tuple[str, str]:
    """(status, detail) of a value the learner's code returned; never raises."""
    try:
        if test is not None:
            verdict = test(value)
            if verdict is None or verdict is True:
                problem = None
            else:
                problem = "the test said no" if verdict is False else str(verdict)
        else:
            problem = describe_difference(value, expected, reveal=reveal)
    except Exception as err:  # a test tripping over an odd value is still feedback
        problem = f"checking it raised {_one_line(err)} (value given: {_short(value)})"
    if problem is None:
        return PASSED, ""
    return WRONG, (f"case {label!r}: {problem}" if label is not None else problem)


def _expected_by_case(name: str, cases: Any, expected: Any) -> Any:
    """``expected`` as {case: value}; a malformed ``cases`` is the author's TypeError."""
    if not isinstance(cases, Mapping) or not cases:
        raise TypeError(f"check {name!r}: cases= must be a non-empty dict {{case in words: "
                        f"arguments}}, got {_short(cases)}")
    for label, args in cases.items():
        if not isinstance(label, str) or not isinstance(args, (tuple, dict)):
            raise TypeError(f"check {name!r}: case {label!r} must be named by text and give a "
                            f"tuple of arguments or a dict of keywords, got {_short(args)}")
    if expected is _NOTHING:
        return expected
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(cases):
            raise TypeError(f"check {name!r}: {len(expected)} expected values for "
                            f"{len(cases)} cases")
        return dict(zip(cases, expected, strict=True))
    if isinstance(expected, dict) and set(expected) == set(cases):
        return expected
    raise TypeError(f"check {name!r}: with cases=, expected= is a list (one value per case) "
                    f"or a dict with the same cases, got {_short(expected)}")


def _evaluate_cases(name: str, function: Any, cases: Mapping[str, tuple | dict],
                    expected: Any, test: Callable | None, reveal: bool) -> CheckResult:
    """Call ``function`` once per case on copies of its arguments; judge each value."""
    if not callable(function):
        raise TypeError(f"check {name!r}: with cases=, give the function to call, got "
                        f"{_short(function)}")
    values = {}
    for label, args in cases.items():
        try:
            args = copy.deepcopy(args)  # the learner may change its inputs in place
        except Exception as err:
            raise TypeError(f"check {name!r}: case {label!r}: its arguments cannot be "
                            f"copied ({_one_line(err)})") from err
        try:
            values[label] = function(**args) if isinstance(args, dict) else function(*args)
        except NotImplementedError:
            return CheckResult(name, NOT_DONE)
        except (Exception, SystemExit) as err:
            return CheckResult(name, WRONG, f"case {label!r}: your code raised "
                                            f"{_one_line(err)}{_none_note(err, args)}")
    if test is not None:
        return CheckResult(name, *_judge(values, None, test, reveal))
    for label, value in values.items():
        status, detail = _judge(value, expected[label], None, reveal, label)
        if status != PASSED:
            return CheckResult(name, status, detail)
    return CheckResult(name, PASSED)


def check(
    name: str,
    attempt: Callable[[], Any] | Any,
    expected: Any = _NOTHING,
    *,
    test: Callable[[Any], str | bool | None] | None = None,
    cases: Mapping[str, tuple | dict] | None = None,
    hints: Sequence[str] = (),
    solution: str | None = None,
    lab: str | None = None,
    locked: bool = False,
) -> None:
    """Evaluate an exercise, print the verdict and record it; returns None so no ``Out[]``.

    The expected value is named only after ``REVEAL_AFTER`` wrong tries. ``cases`` names
    the inputs of an exercise judged on several (see :func:`evaluate`). ``hints`` are the
    ladder ``hint(name)`` climbs, ideas and APIs; ``solution`` is the reference code that
    :func:`solution` prints on request. ``locked=True`` grades the prediction committed
    earlier with :func:`predict` (the first one), not whatever ``attempt`` returns now.

    >>> check("two", lambda: 1 + 1, 2)  # doctest: +SKIP
    passed: two
    """
    global _last_name
    if name not in _hints or (hints and _hints[name].hints != list(hints)):
        _hints[name] = Hints(hints)
    if solution is not None:
        _solutions[name] = str(solution)
    _labs[name] = lab
    _last_name = name
    if locked:
        result, attempt = _locked_attempt(name, attempt, lab)
        if result is not None:
            print(result.line())
            progress.record(lab, name, correct=False, answered=False,
                            hints_used=_hints[name].revealed)
            return
    reveal = locked or _wrong_tries.get(name, 0) + 1 >= REVEAL_AFTER
    result = evaluate(name, attempt, expected, test=test, reveal=reveal, cases=cases)
    if locked and result.status == WRONG:
        result.detail = "your locked prediction: " + result.detail
    if result.status == WRONG:
        _wrong_tries[name] = _wrong_tries.get(name, 0) + 1
    print(result.line())
    if result.status == NOT_DONE:
        print("  Replace `# YOUR CODE HERE` / `raise NotImplementedError()` above and rerun.")
    ladder = _hints[name]
    if not result.passed and ladder.revealed < len(ladder.hints):
        print(f"  Stuck? hint({name!r}) shows a hint ({len(ladder.hints)} available, one at "
              "a time).")
    elif not result.passed and name in _solutions:
        print(f"  No more hints: {_SEE_SOLUTION.format(name=name)}")
    entry = progress.record(
        lab,
        name,
        correct=result.passed,
        answered=result.status != NOT_DONE,
        hints_used=ladder.revealed,
    )
    if result.passed and entry.get("solved_after_answer"):
        print("  (passed after seeing the reference solution; your progress notes it)")


def predict(name: str, attempt: Callable[[], Any] | Any, *, lab: str | None = None) -> None:
    """Commit a prediction before the experiment runs; the first filled-in one is locked.

    Prints one line: ``not done yet: <name>`` (the stub), ``prediction locked: <name>``
    (committed now), or ``prediction already locked: <name>`` (a changed answer is not
    graded: the first one is). The lock lives in the kernel and in the progress file, so a
    restarted kernel keeps it. ``check(name, ..., locked=True)`` grades it later.

    >>> predict("guess", lambda: {"a": True})  # doctest: +SKIP
    prediction locked: guess (1 answer(s)); now run the experiment
    """
    try:
        value = attempt() if callable(attempt) else attempt
    except NotImplementedError:
        print(f"{NOT_DONE}: {name}")
        print("  Fill in your prediction above and rerun this cell before the experiment.")
        return
    except (Exception, SystemExit) as err:
        print(f"{WRONG}: {name}: your code raised {_one_line(err)}")
        return
    first = _committed(name, lab)
    if first is not _NOTHING:
        same = describe_difference(value, first) is None
        print(f"prediction already locked: {name}" + ("" if same else
              " (this changed answer is not graded; your first one is)"))
        return
    _predictions[(lab or progress.current_lab(), name)] = value
    try:
        json.dumps(value)
        stored = value
    except (TypeError, ValueError):  # not JSON: locked in this kernel only
        stored = None
    progress.record(lab, name, correct=False, answered=False, prediction=stored)
    count = len(value) if isinstance(value, (dict, list, tuple, set)) else 1
    print(f"prediction locked: {name} ({count} answer(s)); now run the experiment")


def _committed(name: str, lab: str | None) -> Any:
    """The prediction committed for ``name``: this kernel's, else the progress file's."""
    key = (lab or progress.current_lab(), name)
    if key in _predictions:
        return _predictions[key]
    entry = progress.entry(lab, name)
    if entry is not None and "prediction" in entry:
        _predictions[key] = entry["prediction"]
        return entry["prediction"]
    return _NOTHING


def _locked_attempt(name: str, attempt: Any, lab: str | None) -> tuple[CheckResult | None, Any]:
    """(a result to print instead of grading, or None; the value to grade).

    The stub still unfilled is NOT_DONE even if a prediction is on file (an unfilled lab
    never passes on someone else's record)."""
    try:
        attempt() if callable(attempt) else attempt
    except NotImplementedError:
        return CheckResult(name, NOT_DONE), None
    except (Exception, SystemExit):
        pass
    first = _committed(name, lab)
    if first is not _NOTHING:
        return None, first
    return CheckResult(name, WRONG, "no prediction committed: run the predict(...) cell "
                       "above before the experiment"), None


def hint(name: str | None = None) -> None:
    """Print the next hint for exercise ``name`` (default: the last one checked); never raises.

    >>> hint("is_finite_report")  # doctest: +SKIP
    Hint 1 of 2: torch.isnan and torch.isinf give boolean masks.
    >>> hint(3)
    hint() takes the exercise's name as text, like hint('is_finite_report'); got 3
    """
    name = _exercise_name(name, "hint")
    if name is None:
        return
    if name not in _hints:
        known = ", ".join(sorted(_hints)) or "none yet"
        print(f"No hints registered for {name!r}; known exercises: {known}. Run its check first.")
        return
    ladder = _hints[name]
    if ladder.revealed >= len(ladder.hints) and name in _solutions:
        shown = f" (all {len(ladder.hints)} shown)" if ladder.hints else " for this one"
        print(f"No more hints{shown}. {_SEE_SOLUTION.format(name=name)}")
        return
    print(ladder.next())


def _exercise_name(name: Any, helper: str) -> str | None:
    """The exercise ``hint`` / ``solution`` is about (default: the last one checked), or
    None after printing one line that says why there is none."""
    if name is not None and not isinstance(name, str):
        print(f"{helper}() takes the exercise's name as text, like "
              f"{helper}('is_finite_report'); got {_short(name)}")
        return None
    name = name or _last_name
    if name is None:
        print(f"No exercise checked yet: run a check cell first, then {helper}().")
    return name


_SEE_SOLUTION = "solution({name!r}) shows the reference solution; progress notes that you looked."


def solution(name: str | None = None) -> None:
    """Print the reference solution of exercise ``name`` (default: the last one checked) and
    note in the progress file that it was seen; never raises.

    Hints name the idea and the API; the code itself is this separate step, so the progress
    file can tell a check passed alone from one passed after looking.

    >>> solution("is_finite_report")  # doctest: +SKIP
    Reference solution for 'is_finite_report' (your progress notes that you looked):
    """
    name = _exercise_name(name, "solution")
    if name is None:
        return
    if name not in _solutions:
        known = ", ".join(sorted(_solutions)) or "none yet"
        why = ("it has no reference solution to show" if name in _hints
               else "run its check cell first")
        print(f"No reference solution for {name!r}: {why}. Exercises with one: {known}.")
        return
    print(f"Reference solution for {name!r} (your progress notes that you looked):")
    for line in _solutions[name].splitlines():
        print(f"    {line}")
    progress.record(_labs.get(name), name, correct=False, answered=False, answer_shown=True,
                    hints_used=_hints[name].revealed if name in _hints else None)


def _none_note(err: BaseException, args: tuple | dict) -> str:
    """Which arguments were None, when the learner's code tripped over a None.

    >>> _none_note(TypeError("'NoneType' object is not subscriptable"), {"a": None, "b": 1})
    ' (a is None in this case)'
    """
    if not isinstance(err, (TypeError, AttributeError)) or "NoneType" not in str(err):
        return ""
    if isinstance(args, dict):
        nones = [str(key) for key, value in args.items() if value is None]
    else:
        nones = [f"argument {i + 1}" for i, value in enumerate(args) if value is None]
    if not nones:
        return ""
    return f" ({', '.join(nones)} {'is' if len(nones) == 1 else 'are'} None in this case)"


def describe_difference(got: Any, expected: Any, where: str = "", *,
                        reveal: bool = True) -> str | None:
    """None when ``got`` matches ``expected``, else one line on the first difference.

    NaN matches NaN (a learner who predicts NaN is right); floats match to 1e-6 relative.
    ``reveal=False`` says where and what was got, not what was expected.

    >>> describe_difference({"nan": 1}, {"nan": 2})
    "['nan']: got 1, expected 2"
    >>> describe_difference({"nan": 1}, {"nan": 2}, reveal=False)
    "['nan']: got 1, which is not right"
    """
    import torch

    at = f"{where}: " if where else ""

    def want(value: Any) -> str:
        return f", expected {_short(value)}" if reveal else ", which is not right"

    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{at}expected a tensor, got {type(got).__name__} {_short(got)}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"{at}shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        g, e = got.detach().double().cpu(), expected.detach().double().cpu()
        same = torch.isclose(g, e, rtol=1e-6, atol=0.0, equal_nan=True) | (g == e)
        if bool(same.all()):
            return None
        idx = tuple(int(i) for i in (~same).nonzero()[0])
        return f"{at}at index {idx}: got {_short(got[idx].item())}{want(expected[idx].item())}"
    if isinstance(expected, bool) or expected is None:
        if got is expected or _equal(got, expected):
            return None
        return f"{at}got {_short(got)}{want(expected)}"
    if isinstance(expected, (int, float)):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, numbers.Real):
            return f"{at}expected a number, got {type(got).__name__} {_short(got)}"
        try:
            got = float(got) if not isinstance(got, int) else got
            if isinstance(expected, float) and math.isnan(expected):
                if isinstance(got, float) and math.isnan(got):
                    return None
            elif got == expected or math.isclose(got, expected, rel_tol=1e-6):
                return None
        except (OverflowError, ValueError, TypeError):  # an int too large for a float
            pass
        return f"{at}got {_short(got)}{want(expected)}"
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{at}expected a dict, got {type(got).__name__} {_short(got)}"
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            return f"{at}keys differ: missing {missing}, unexpected {extra}"
        for key in expected:
            problem = describe_difference(got[key], expected[key], f"{where}[{key!r}]",
                                          reveal=reveal)
            if problem:
                return problem
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{at}expected a list, got {type(got).__name__} {_short(got)}"
        if len(got) != len(expected):
            return f"{at}length {len(got)}, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            problem = describe_difference(g, e, f"{where}[{i}]", reveal=reveal)
            if problem:
                return problem
        return None
    if isinstance(expected, (set, frozenset)):
        if not isinstance(got, (set, frozenset, list, tuple)):
            return f"{at}expected a set, got {type(got).__name__} {_short(got)}"
        try:
            got = set(got)
        except TypeError:
            return f"{at}expected a set of plain values, got unhashable items in {_short(got)}"
        if got == expected:
            return None
        if not reveal:
            return (f"{at}{len(expected - got)} missing, should not be there "
                    f"{sorted(got - expected, key=repr)}")
        return (
            f"{at}missing {sorted(expected - got, key=repr)}, "
            f"should not be there {sorted(got - expected, key=repr)}"
        )
    if _equal(got, expected):
        return None
    return f"{at}got {_short(got)}, expected {_short(expected)}"


def _equal(got: Any, expected: Any) -> bool:
    """``got == expected`` as a plain bool; False when the comparison raises or is not a bool
    (a numpy array compared elementwise)."""
    try:
        return bool(got == expected)
    except Exception:
        return False


def _short(value: Any, limit: int = 60) -> str:
    return _show(value, limit)


def _one_line(err: BaseException) -> str:
    try:
        message = str(err).strip().splitlines()
    except Exception:  # an exception whose __str__ itself fails
        message = []
    return f"{type(err).__name__}: {message[0]}" if message else type(err).__name__
