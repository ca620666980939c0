"""Feedback a learner can trust: the labs' exercise checks judge what the lesson is about,
name the case that failed, run the learner's code on copies of its inputs, suggest only
helpers the lab imports, and keep the reference code behind an explicit ``solution()``.

The lab tests run one check cell of a lab's source (``solutions/NN_x.py``) in a fresh
namespace holding the lab's imports, with the learner's function replaced by a variant
(a known bug, an in-place version) and any earlier cell's result the cell reads stubbed.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import re
import textwrap
import types
from pathlib import Path

import jupytext
import nbformat
import pytest
import torch
import torch.nn.functional as F

from nanlab.course import checks, progress

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "solutions").glob("[0-9]*.py"))
LABS = sorted((ROOT / "labs").glob("[0-9]*.ipynb"))
HELPERS = ("check", "hint", "practice", "predict", "show_progress", "solution", "start_lab")


@pytest.fixture(autouse=True)
def _fresh_checks(monkeypatch):
    """Each test starts with no hints, solutions, wrong tries or predictions in the kernel."""
    for name in ("_hints", "_solutions", "_labs", "_wrong_tries", "_predictions"):
        monkeypatch.setattr(checks, name, {})
    monkeypatch.setattr(checks, "_last_name", None)


# --- reading labs ---------------------------------------------------------------------------


def cells_of(path: Path) -> list[tuple[str, str]]:
    """(cell type, source) of every cell of a jupytext source or a notebook, in order."""
    nb = jupytext.read(path) if path.suffix == ".py" else nbformat.read(path, as_version=4)
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def _tree(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # a cell with IPython syntax
        return None


def imported_names(source: str) -> set[str]:
    """The names a code cell binds with import statements at its top level."""
    tree = _tree(source)
    if tree is None:
        return set()
    return {(alias.asname or alias.name).split(".")[0] for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def check_calls(source: str) -> list[ast.Call]:
    """The ``check(...)`` calls of a code cell."""
    tree = _tree(source)
    return [] if tree is None else [
        node for node in ast.walk(tree) if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name) and node.func.id == "check"]


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def run_check(lab: str, name: str, *, reference: str | None = None, **names) -> tuple[str, dict]:
    """Run the check cell of exercise ``name`` in lab ``lab``; (what it printed, namespace).

    The namespace holds every name the lab imports, the lab's own function ``reference``
    when named (its cell is run), then ``names`` (the learner's function under test,
    stand-ins for earlier cells' results)."""
    cells = [source for kind, source in cells_of(ROOT / "solutions" / f"{lab}.py")
             if kind == "code"]
    cell = next(s for s in cells if any(
        isinstance(c.args[0], ast.Constant) and c.args[0].value == name for c in check_calls(s)))
    namespace: dict = {"__name__": f"lab_{lab}"}
    for source in cells:
        tree = _tree(source)
        imports = [n for n in (tree.body if tree else [])
                   if isinstance(n, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(imports, []), lab, "exec"), namespace)  # noqa: S102
    namespace.update(names)
    if reference is not None:
        exec(next(s for s in cells if f"def {reference}(" in s), namespace)  # noqa: S102
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell, f"{lab}: check {name}", "exec"), namespace)  # noqa: S102
    return out.getvalue(), namespace


def verdict(output: str) -> str:
    """The check line a check cell printed (the cell may print facts before it)."""
    return next(line for line in output.splitlines()
                if line.startswith((checks.PASSED, checks.NOT_DONE, checks.WRONG)))


# --- 1. Lab 14 judges the loss of every micro-batch, not only the gradients ----------------


def reference_loss(logits, targets, total_targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100,
                           reduction="sum") / total_targets


def mean_times_share(logits, targets, total_targets):
    """The bug Section 4 teaches: the micro-batch's mean loss (0 / 0 = NaN when every
    target is masked), weighted by its share of the targets. Its gradients are right."""
    share = (targets != -100).sum() / total_targets
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100) * share


def mean_of_means(logits, targets, total_targets):
    """Each micro-batch's mean loss over the 4 micro-batches: NaN, and wrongly weighted."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100) / 4


def per_micro_batch_mean(logits, targets, total_targets):
    """Finite everywhere (an empty micro-batch adds 0) but each micro-batch weighs the same."""
    count = int((targets != -100).sum())
    return reference_loss(logits, targets, 1) / (4 * max(count, 1))


def in_place_loss(logits, targets, total_targets):
    """Right, and it overwrites its input: masked targets become class 0, weighted out."""
    kept = (targets != -100).flatten()
    targets.clamp_(min=0)
    per_target = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    return (per_target * kept).sum() / total_targets


def test_a_nan_loss_on_the_all_masked_micro_batch_fails_though_its_gradients_are_right():
    out, lab = run_check("14_large_run_faults", "token_weighted_accumulation",
                         token_weighted_loss=mean_times_share)
    assert verdict(out) == (
        "not yet right: token_weighted_accumulation: case 'micro-batch 0, every target "
        "masked': its loss is nan: what should a micro-batch without targets add?")
    whole, losses, want, got = lab["accumulated_step"]()  # what the old check looked at
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(want, got, strict=True))
    assert math.isnan(losses["micro-batch 0, every target masked"])


@pytest.mark.parametrize(("learner", "line"), [
    (mean_of_means, "case 'micro-batch 0, every target masked': its loss is nan"),
    (per_micro_batch_mean, "the micro-batch losses add up to 0.78 x the whole batch's loss"),
], ids=["mean-of-means", "finite-but-per-micro-batch"])
def test_the_whole_batch_token_weighted_loss_must_be_reproduced(learner, line):
    out, _ = run_check("14_large_run_faults", "token_weighted_accumulation",
                       token_weighted_loss=learner)
    assert verdict(out).startswith(f"not yet right: token_weighted_accumulation: {line}")


@pytest.mark.parametrize("learner", [reference_loss, in_place_loss], ids=["reference", "in-place"])
def test_a_token_weighted_loss_passes(learner):
    out, _ = run_check("14_large_run_faults", "token_weighted_accumulation",
                       token_weighted_loss=learner)
    assert verdict(out) == "passed: token_weighted_accumulation"


# --- 2. the learner's code runs on copies: in-place code is judged like any other ----------


def unscale_in_place(grads, scale):
    for g in grads:
        g.div_(scale)
    return grads, any(not bool(torch.isfinite(g).all()) for g in grads)


def clip_in_place(grads, max_norm):
    total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return grads, total


def softmax_in_place(x):
    x.sub_(x.amax(-1, keepdim=True)).exp_()
    return x.div_(x.sum(-1, keepdim=True))


IN_PLACE = [  # (lab, exercise, names for the cell, a case input that must be untouched)
    ("04_mixed_precision", "unscale_and_check", {"unscale_and_check": unscale_in_place},
     lambda lab: (lab["UNSCALE_CASES"]["clean"][0][0], torch.tensor([2048.0, -512.0]))),
    ("03_learning_rate", "clip_by_global_norm", {"clip_by_global_norm": clip_in_place},
     lambda lab: (lab["CLIP_CASES"]["one huge tensor among small"][0][0],
                  torch.full((3,), 1e4))),
    ("06_norms_softmax", "stable_softmax", {
        "stable_softmax": softmax_in_place,
        "naive_softmax": lambda x: x.exp() / x.exp().sum(-1, keepdim=True)},
     lambda lab: (lab["LOGITS"][0], torch.tensor([0.0, 5, 12, 20, 30], dtype=torch.float16))),
]


@pytest.mark.parametrize(("lab", "name", "names", "untouched"), IN_PLACE,
                         ids=[n for _, n, *_ in IN_PLACE])
def test_an_in_place_solution_passes_and_leaves_the_cases_alone(lab, name, names, untouched):
    out, namespace = run_check(lab, name, **names)
    assert verdict(out) == f"passed: {name}", out
    now, before = untouched(namespace)
    assert torch.equal(now, before)


def test_cases_are_deep_copies_and_a_tensor_stays_as_it_was():
    t = torch.ones(3)

    def halve_in_place(x):
        return x.div_(2)

    for _ in range(2):
        result = checks.evaluate("halve", halve_in_place, [torch.full((3,), 0.5)],
                                 cases={"ones": (t,)})
        assert result.passed, result.line()
    assert torch.equal(t, torch.ones(3))


# --- 3. every helper a lab suggests is imported by that lab --------------------------------


def suggestions(kind: str, source: str) -> set[str]:
    """The course helpers a cell tells the learner to call: named as ``helper(`` anywhere in
    its text, and for a code cell, what its checks print (``Stuck? hint(...)`` where hints
    are given, ``solution(...)`` where a reference solution is)."""
    named = set(re.findall(r"(?<![\w.])(" + "|".join(HELPERS) + r")\(", source))
    if kind == "code":
        for call in check_calls(source):
            if keyword(call, "hints") is not None:
                named.add("hint")
            if keyword(call, "solution") is not None:
                named.add("solution")
    return named


def unimported(cells: list[tuple[str, str]]) -> list[str]:
    """The suggestions a learner cannot follow: a code cell's (what it or its check prints)
    not imported by then; prose's (which may point ahead) not imported anywhere."""
    everywhere = set().union(*(imported_names(s) for kind, s in cells if kind == "code"))
    imported: set[str] = set()
    missing = []
    for index, (kind, source) in enumerate(cells):
        if kind == "code":
            imported |= imported_names(source)
        known = imported if kind == "code" else everywhere
        missing += [f"cell {index} suggests {name}(...)" for name in
                    sorted(suggestions(kind, source) - known)]
    return missing


@pytest.mark.parametrize("path", SOURCES + LABS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_helper_a_lab_suggests_is_imported(path):
    missing = unimported(cells_of(path))
    assert not missing, f"{path.name}: not imported: {missing}"


def test_the_import_test_catches_a_check_whose_hint_is_not_imported():
    cells = [("markdown", "Run `hint('x')` when stuck."),
             ("code", "from nanlab.course import check"),
             ("code", "check('x', lambda: 1, 1, hints=['h'], solution='return 1')")]
    assert unimported(cells) == ["cell 0 suggests hint(...)", "cell 2 suggests hint(...)",
                                 "cell 2 suggests solution(...)"]


# --- 4. a case that raises is named, and a None argument is pointed at ---------------------


def sop_family_without_none_checks(batch_problems, amp_off, lr_div10, grad_decades,
                                   init_notes):
    """Reads every replay's outcome before asking whether that replay was run."""
    if batch_problems:
        return "dirty data"
    if amp_off["finite"] and amp_off["learning"]:
        return "mixed precision (fp16)"
    if lr_div10["finite"] and lr_div10["learning"]:
        return "learning rate"
    if grad_decades >= 3:
        return "gradient explosion"
    return "init / eps" if init_notes else "not found"


SECTION_FINDINGS = {"problems": [], "outcome": lambda replay: replay, "decades": 0.3,
                    "init_notes": [], "replays": {"amp_off": {"finite": True, "learning": True},
                                                  "lr_div10": {"finite": True,
                                                               "learning": True}}}


def test_sop_family_on_a_none_finding_is_one_line_naming_the_case_and_the_none():
    out, lab = run_check("07_sop_mystery", "sop_family",
                         sop_family=sop_family_without_none_checks, **SECTION_FINDINGS)
    lines = [line for line in out.splitlines() if not line.startswith("  ")]
    assert lines == [
        "not yet right: sop_family: case 'norm eps 0; AMP off and grad norms not run (None)': "
        "your code raised TypeError: 'NoneType' object is not subscriptable (amp_off, "
        "grad_decades are None in this case)"]


def test_the_reference_sop_family_passes():
    out, lab = run_check("07_sop_mystery", "sop_family", reference="sop_family",
                         **SECTION_FINDINGS)
    assert verdict(out) == "passed: sop_family"


def test_a_raising_case_is_named_and_a_stub_is_not_done():
    def first(xs):
        return xs[0]

    result = checks.evaluate("first", first, [1, None], cases={"one item": ([1],),
                                                               "no item": ([],)})
    assert result.line() == ("not yet right: first: case 'no item': your code raised "
                             "IndexError: list index out of range")

    def stub(xs):
        raise NotImplementedError()

    assert checks.evaluate("first", stub, [1], cases={"one item": ([1],)}).status == \
        checks.NOT_DONE


@pytest.mark.parametrize(("cases", "expected", "message"), [
    ({"a": (1,)}, [1, 2], "check 'f': 2 expected values for 1 cases"),
    ({"a": 1}, [1], "check 'f': case 'a' must be named by text and give a tuple"),
    ([(1,)], [1], "check 'f': cases= must be a non-empty dict"),
    ({"a": (1,)}, {"b": 1}, "check 'f': with cases=, expected= is a list"),
])
def test_a_malformed_cases_argument_is_one_clear_error(cases, expected, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        checks.evaluate("f", lambda x: x, expected, cases=cases)


# --- 5. every failure names its case in words ----------------------------------------------

CASE_LINE = re.compile(r"^not yet right: (\w+): case (['\"]).+?\2[: ]")
WRONG_ANSWERS = [
    ("00_start_here", "first_bad_step", {"first_bad_step": lambda losses: 0,
                                         "run": types.SimpleNamespace(losses=lambda: [1.0])}),
    ("01_numbers", "exp_overflow_threshold", {"exp_overflow_threshold": lambda dtype: 88.72}),
    ("02_dirty_data", "safe_standardize", {"safe_standardize": lambda x: x}),
    ("03_learning_rate", "clip_by_global_norm", {"clip_by_global_norm": lambda g, m: (g, 0.0)}),
    ("04_mixed_precision", "unscale_and_check", {"unscale_and_check": lambda g, s: (g, False)}),
    ("03_learning_rate", "lr_at", {"lr_at": lambda step, warmup, total, base_lr, m: base_lr}),
    ("07_sop_mystery", "first_bad_step", {
        "first_bad_step": lambda losses: None,
        "record": types.SimpleNamespace(losses=lambda: [1.0], first_nonfinite_step=None)}),
    ("07_sop_mystery", "sop_family", {**SECTION_FINDINGS,
                                      "sop_family": lambda **findings: "dirty data"}),
    ("08_guard_recovery", "rollback_target", {"rollback_target": lambda c, s, t: s}),
    ("10_interview", "result_sentence", {"result_sentence": lambda facts: "Fixed.", "facts": {
        "fix": "bf16", "symptom_step": 40, "loss_fixed_at_step": 1.0, "loss_clean_at_step": 1.0,
        "batches_after_fix": 160}}),
    ("11_lr_sensitivity", "my_sensitivity", {"my_sensitivity": lambda losses, l0: 0.0}),
    ("12_incidents", "spike_score", {"spike_score": lambda values, window, sigma: 0.0}),
]


@pytest.mark.parametrize(("lab", "name", "names"), WRONG_ANSWERS,
                         ids=[f"{lab[:2]}-{name}" for lab, name, _ in WRONG_ANSWERS])
def test_a_wrong_answer_names_the_case_in_words(lab, name, names):
    out, _ = run_check(lab, name, **names)
    assert CASE_LINE.match(verdict(out)), verdict(out)
    assert not re.search(r": \[\d+\]: ", verdict(out))  # never a bare position


def test_describe_difference_of_a_named_case():
    result = checks.evaluate("f", lambda x: 2.0, [1.0, 2.0],
                             cases={"all-masked micro-batch": (0,), "one target": (1,)})
    assert result.line() == ("not yet right: f: case 'all-masked micro-batch': got 2.0, "
                             "expected 1.0")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_no_check_passes_several_unnamed_cases(path):
    """A list built over several inputs is judged by position: pass named cases instead."""
    for kind, source in cells_of(path):
        for call in check_calls(source) if kind == "code" else []:
            if keyword(call, "cases") is not None:  # the attempt runs once per named case
                continue
            attempt = call.args[1] if len(call.args) > 1 else None
            body = attempt.body if isinstance(attempt, ast.Lambda) else None
            assert not isinstance(body, (ast.ListComp, ast.List, ast.Tuple)), (
                f"{path.name}: check {ast.unparse(call.args[0])} passes a list of cases: "
                "give them names with cases={...}")


# --- 6. hint ladders end with the idea and the API; the code is solution(name) ------------

CODE = re.compile(r"\breturn\b|\s=\s|\+=|==|`|\blambda\b|\bdef\s|\bfor \w+(, \w+)* in\b|;\s*\w+"
                  r"\s*=|\w\(\w[^)]*\)\s*[:;]|\{\s*[\"']\w+[\"']\s*:|\bf[\"']")


def ladders() -> list[tuple[str, str, list[str], str | None]]:
    """(lab, exercise, hints, solution text) of every check with a literal hint ladder that
    grades the learner's code (a locked prediction's answer is the measurement itself)."""
    found = []
    for path in SOURCES:
        for kind, source in cells_of(path):
            for call in check_calls(source) if kind == "code" else []:
                hints, locked = keyword(call, "hints"), keyword(call, "locked")
                if not isinstance(hints, ast.List) or (
                        isinstance(locked, ast.Constant) and locked.value is True):
                    continue
                solution = keyword(call, "solution")
                found.append((path.stem, ast.literal_eval(call.args[0]),
                              [ast.literal_eval(h) for h in hints.elts],
                              None if solution is None else ast.literal_eval(solution)))
    return found


LADDERS = ladders()


def test_every_lab_has_a_ladder():
    assert {lab for lab, *_ in LADDERS} == {p.stem for p in SOURCES}


@pytest.mark.parametrize(("lab", "name", "hints", "solution"), LADDERS,
                         ids=[f"{lab[:2]}-{name}" for lab, name, *_ in LADDERS])
def test_a_ladder_ends_with_an_idea_and_the_code_is_a_separate_solution(lab, name, hints,
                                                                        solution):
    assert solution, f"{lab}: check {name!r} has hints but no solution=..."
    assert not CODE.search(hints[-1]), f"{lab}: {name}'s last hint is code: {hints[-1]!r}"
    code_lines = [line.strip() for line in solution.splitlines() if len(line.strip()) > 12
                  and not line.strip().startswith("#")]
    for rung in hints:
        assert not any(line in rung for line in code_lines), f"{lab}: {name}: {rung!r}"


def test_the_code_finder_sees_the_old_last_rungs():
    old = ["if found_inf: return scale * backoff, 0; good_steps += 1",
           "for i, loss in enumerate(losses): if not math.isfinite(loss): return i",
           "`return F.cross_entropy(logits.flatten(0, 1), targets.flatten())`",
           "{\"finite\": int(torch.isfinite(t).sum()), \"inf\": int(torch.isinf(t).sum())}",
           "return math.log(torch.finfo(dtype).max)",
           "e = torch.exp(x - x.amax(-1, keepdim=True)); return e / e.sum(-1, keepdim=True)",
           "f\"... a loss of {facts['loss_fixed_at_step']:.3g} ...\" writes 0.43219 as 0.432"]
    assert all(CODE.search(rung) for rung in old)
    assert not CODE.search("torch.isfinite gives a mask; count where it is False")


def solution_code(lab: str) -> str:
    """The code between the lab's solution markers, without comments or whitespace."""
    source = (ROOT / "solutions" / f"{lab}.py").read_text()
    blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)\n\s*### END SOLUTION", source, re.S)
    return _squeeze("\n".join(blocks))


def _squeeze(code: str) -> str:
    return re.sub(r"\s+", "", re.sub(r"#[^\n\"']*$", "", code, flags=re.M))


@pytest.mark.parametrize(("lab", "name", "hints", "solution"),
                         [ladder for ladder in LADDERS if ladder[3]],
                         ids=[f"{lab[:2]}-{name}" for lab, name, _, s in LADDERS if s])
def test_the_solution_shown_is_the_labs_own_reference_code(lab, name, hints, solution):
    compile(textwrap.indent(solution, "    ").join(("def f():\n", "\n")), name, "exec")
    assert _squeeze(solution) in solution_code(lab), f"{lab}: {name}'s solution= drifted"


def test_solution_is_an_explicit_step_that_progress_tells_apart(capsys):
    def ask():
        checks.check("sq", lambda x: x * x, [4, 9], cases={"two": (2,), "three": (3,)},
                     hints=["Multiply."], solution="return x * x")

    checks.check("sq", lambda x: x + x, [4, 9], cases={"two": (2,), "three": (3,)},
                 hints=["Multiply."], solution="return x * x")
    assert "Stuck? hint('sq')" in capsys.readouterr().out
    checks.hint("sq")
    assert capsys.readouterr().out == "Hint 1 of 1: Multiply.\n"
    checks.hint("sq")
    assert capsys.readouterr().out == (
        "No more hints (all 1 shown). solution('sq') shows the reference solution; progress "
        "notes that you looked.\n")
    assert progress.entry(None, "sq").get("answer_shown") is None  # not yet seen
    checks.solution("sq")
    assert capsys.readouterr().out == ("Reference solution for 'sq' (your progress notes that "
                                       "you looked):\n    return x * x\n")
    assert progress.entry(None, "sq")["answer_shown"] is True
    ask()
    assert capsys.readouterr().out == ("passed: sq\n  (passed after seeing the reference "
                                       "solution; your progress notes it)\n")
    entry = progress.entry(None, "sq")
    assert entry["correct"] and entry["solved_after_answer"]
    lab = progress.current_lab()
    assert progress.summary()[lab]["after_answer"] == 1
    assert "[x] sq (2 attempts, solved after seeing the solution)" in progress.show_progress()


def test_a_check_passed_alone_is_not_marked_even_if_the_solution_is_seen_later(capsys):
    checks.check("two", lambda: 2, 2, hints=["Add."], solution="return 1 + 1")
    checks.solution("two")
    entry = progress.entry(None, "two")
    assert entry["correct"] and not entry["solved_after_answer"] and entry["answer_shown"]
    assert progress.summary()[progress.current_lab()]["after_answer"] == 0
    assert "[x] two (1 attempt, solution seen)" in progress.show_progress()


def test_solution_of_an_unknown_or_odd_name_is_one_line(capsys):
    checks.solution("nothing")
    checks.solution(3)
    checks.check("bare", lambda: 1, 1)
    checks.solution("bare")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "No reference solution for 'nothing': run its check cell first. Exercises with one: "
        "none yet.",
        "solution() takes the exercise's name as text, like solution('is_finite_report'); "
        "got 3",
        "passed: bare",
        "No reference solution for 'bare': it has no reference solution to show. Exercises "
        "with one: none yet."]
