"""No stale numbers in the labs' prose: a number a Markdown cell quotes is read from the run.

The claims-map test (tests/test_claims.py) checks that each number of a claim's finding
appears in the executed labs it points to. This test does the same for every number in
every lab's Markdown, sentence by sentence. A number is accounted for when it is

1. **printed by the run**: it appears, to the precision quoted (0.82 for 0.8234, 1.3e4
   for 12,583), in the stored outputs of the executed solution notebook, or of a lab the
   same sentence names ("Lab 04's run ...");
2. **an input the learner can see**: it appears in the lab's code (a config value, the
   step a fault is injected at, a threshold a check cell tests), or is a default of
   ``TrainConfig`` or of a fault's parameters;
3. **a reference**: a year, an arXiv id, a pull request or issue (#1234), a section,
   figure, table, lab, step of the SOP, exercise or claim number, a power such as 2⁶⁰;
4. **a constant of floating point** (``CONSTANTS``: fp16's 65504, exp's overflow points);
5. **from a named source**: its sentence, or the first sentence of its paragraph (a
   table: the table with its header), names one: a paper ("et al.", "arXiv", "paper"),
   a model whose paper the lab quotes (PaLM, OPT, ...), a repository or its file, a
   framework's documentation.

Anything else fails, with the lab, the number and its sentence. That is the point: a
number pasted from an earlier run and left behind when the run changed (the issue's
"replays from the nearest checkpoint (step 75)" where the run prints 100) is in no
output and no code, and fails here. ``ARITHMETIC`` lists, per lab, the few numbers the
prose derives by hand (a worked example: 2,048 GPUs for a day), each with why.

Limits, said plainly: a stale number that happens to equal another number the lab
prints or uses still passes (a coincidence check cannot tell them apart), and a
sentence that names a source is trusted for all its numbers.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
LABS = sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.py"))

# 12,583 (thousands), 0.54, 1.3e4, 5e-3, 2.5; not the 13 of 2.13.0 or of fp16.
NUMBER = re.compile(
    r"(?<![\w.,:])(?<![A-Za-z]-)\d{1,3}(?:,\d{3})+(?![\d.])"
    r"|(?<![\w.:])(?<![A-Za-z]-)\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.]\d|[\w])"
)
# Numbers that are references, not values: the match is removed before numbers are read.
REFERENCES = re.compile(
    r"""(?x)
    \b(?:19|20)\d\d\b                                  # a year
    | \b\d{4}\.\d{4,5}\b                                # an arXiv id
    | \#\d+                                             # a pull request or an issue
    | \b(?:[Ss]ections?|[Ss]ec\.|§|[Ff]ig(?:ure)?s?\.?|[Tt]ables?|[Aa]ppendix|[Aa]lgorithm
         |[Ll]abs?|[Ss]teps?\ of\ the\ SOP|SOP\ steps?|[Ee]xercises?|[Cc]laims?|[Ee]q\.
         |[Cc]hapter|[Pp]art|PR|run|version|v)\s*[\d.]+(?:\s*(?:,|and|-|–|to)\s*[\d.]+)*
    | \b[CBMVIW]\d+\b                                   # a claim id
    | \d+\s*(?:\*\*|\^)\s*-?\d+ | \d+[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+       # a power: 2**60, 2^-25, 2⁶⁰
    | \b\d+(?:\.\d+)?\s*(?:GiB|MiB|EiB|GB|MB|KiB|bits?|bytes?)\b  # sizes
    | \bfp\d+|\bbf\d+|\bint\d+|\bfloat\d+|\bbfloat\d+   # dtype names
    | \b\d+(?:st|nd|rd|th)\b                            # ordinals
    | \d+(?:\.\d+)?\s*[xX×]\b                           # "40x": a ratio the prose derives
    | \b\d+(?:\s*(?:to|-|–)\s*\d+)?\s*(?:minutes?|min|s|seconds?|hours?)\b  # a duration
    | \bbits?\s+\d+(?:\s*(?:-|–|to)\s*\d+)?              # a bit position
    | `[^`]*` | \$[^$]*\$                                # code and formulas
    """
)
# Facts of floating point the labs quote, not measurements.
CONSTANTS = [
    65504, 65536,  # fp16's largest number; 2^16, GradScaler's initial scale
    88.72, 11.09,  # where exp overflows fp32 and fp16
    3.4e38, 1.18e-38, 1e19,  # fp32's largest and smallest normal number; √(3.4e38)
    6e-8, 5.96e-8, 3e-8, 6.1e-5, 256,  # fp16's smallest numbers, half of it; √65504
    1.0014e-5, 1.0078, 0.0078125, 512,  # fp16's 1e-5; bf16 next to 1; bf16's spacing at 7e4
    23, 127, 128, 255,  # fp32's mantissa bits, exponent bias, top exponent bit, inf/NaN
    1e-8, 1e-5, 1e-6, 1e-12,  # the usual eps values
]
# A sentence that names its source is trusted for its numbers.
SOURCED = re.compile(
    r"et al\.|arXiv|\bpaper\b|\breport\b|chronicles?|logbook|github|\.py\b|\.md\b"
    r"|documentation|\bdocs?\b|PyTorch's|Megatron|DeepSpeed|PaLM|OPT|BLOOM|OLMo|GPT-3"
    r"|Gopher|Chinchilla|ViT|LLaMA|Llama|transformers|HF Trainer|source:",
)
# Numbers the prose works out by hand or sets as an example (not read from a run), by
# lab, each with the reason. Add to it only what no run prints and no source gives.
ARITHMETIC: dict[str, dict[str, str]] = {
    "00_start_here": {"40": "an example step: any batch is a function of (seed, step)"},
    "01_numbers": {"80": "the powers of ten between the three dtypes' printed limits"},
    "03_learning_rate": {"0.64": "0.01 · √(64 · 64), the norm of the code's random gradient"},
    "04_mixed_precision": {"12": "an example score just past exp's 11.09"},
    "05_init_depth": {"256": "the MLP's width, 4 × n_embd",
                      "0.125": "Xavier's std for a 64 → 64 weight, √(1/64)",
                      "0.177": "He's std for a 64 → 64 weight, √(2/64)"},
    "06_norms_softmax": {"90": "300², a variance of about 90 000"},
    "07_sop_mystery": {"30": "nanlab.analysis.judge's threshold for 'learning', 30 % of "
                          "the first loss"},
    "08_guard_recovery": {"2,048": "a worked example of a large run",
                          "49,000": "2,048 GPUs × 24 hours, the worked example",
                          "56": "the step before the printed failure at step 57"},
    "10_interview": {"60": "the rubric's pass mark, 60 % of the core points"},
    "11_lr_sensitivity": {"42": "7 LRs × 6 recipes",
                          "15": "the sweep's warmup, STEPS // 10 in the code"},
    "13_optimizer_state": {"1e44": "(1e22)², the square of the example gradient"},
}


def markdown_cells(lab: str) -> list[str]:
    """The Markdown cells of a lab's percent-format source (what a learner reads)."""
    source = (SOLUTIONS / f"{lab}.py").read_text(encoding="utf-8")
    cells = []
    for cell in re.split(r"^# %%", source, flags=re.M):
        if cell.startswith(" [markdown]"):
            lines = [re.sub(r"^# ?", "", line) for line in cell.splitlines()[1:]]
            # heading and list numbers ("## 6.", "3. ...", "### 1a.") are not values
            lines = [re.sub(r"^(#+\s*|\s*)\d+[a-z]?\.(?=\s)", r"\1", line) for line in lines]
            cells.append("\n".join(lines))
    return cells


def notebook_text(lab: str) -> tuple[str, str]:
    """(code, outputs) of the executed solution notebook."""
    nb = json.loads((SOLUTIONS / f"{lab}.ipynb").read_text(encoding="utf-8"))
    code, outputs = [], []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        code.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            outputs.append("".join(out.get("text", "")))
            for kind in ("text/plain", "text/markdown", "text/html"):
                data = out.get("data", {}).get(kind, "")
                outputs.append("".join(data) if isinstance(data, list) else data)
    return "\n".join(code), "\n".join(outputs)


def package_defaults() -> str:
    """The defaults a learner can look up: ``TrainConfig()`` (and its model's config) and
    the default parameters of every fault in the catalogue."""
    from nanlab import TrainConfig
    from nanlab.faults import FAULTS

    params = [f"{name}={p.default}" for fault in FAULTS.values()
              for name, p in fault.params.items()]
    return repr(TrainConfig()) + "\n" + " ".join(params)


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def values(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in numbers(text)]


def agrees(quoted: str, seen: list[float]) -> bool:
    """``quoted`` is one of ``seen`` written to its own precision (0.82 for 0.824, 1.3e4
    for 1.258e+04, 12,000 for 12,004 only if written 12,004): within half a unit of its
    last digit."""
    plain = quoted.replace(",", "").lower()
    mantissa, _, exponent = plain.partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half = 0.5 * 10.0 ** (int(exponent or 0) - decimals) * (1 + 1e-9)
    value = float(plain)
    return any(abs(value - s) <= half for s in seen)


def units(cell: str) -> list[tuple[str, str]]:
    """A cell cut into (sentence, the first sentence of its paragraph): a list item, a
    table (whole, with its header) and a formula are one sentence each."""
    out = []
    for block in re.split(r"\n\s*\n", cell):
        if block.lstrip().startswith("|"):
            out.append((block, block))
            continue
        for item in re.split(r"\n(?=\s*[-*] )", block):
            sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z*`(\"])", item.replace("\n", " "))
            out += [(sentence, sentences[0]) for sentence in sentences]
    return out


def labs_named(sentence: str) -> list[str]:
    """Other labs a sentence quotes ("Lab 04", "Labs 03 and 07")."""
    named = []
    for group in re.findall(r"\bLabs? ((?:\d\d(?:,? (?:and |or )?)?)+)", sentence):
        named += [f"{n}_" for n in re.findall(r"\d\d", group)]
    return [lab for lab in LABS if any(lab.startswith(n) for n in named)]


_TEXT: dict[str, tuple[str, str]] = {}


def _text(lab: str) -> tuple[str, str]:
    if lab not in _TEXT:
        _TEXT[lab] = notebook_text(lab)
    return _TEXT[lab]


def said_of_a_step(n: str, lines: list[str]) -> bool:
    """``step n`` is printed or set: a line of the outputs or code has ``step n``
    (``step: n``, ``at_step=n``), or has ``n`` and the word step."""
    alone = re.compile(rf"(?<![\d.]){re.escape(n)}(?![\d.])")
    near = re.compile(rf"step\w*\W{{0,3}}{re.escape(n)}(?![\d.])", re.I)
    return any(near.search(line) or ("step" in line.lower() and alone.search(line))
               for line in lines)


def stale_numbers(lab: str) -> list[tuple[str, str]]:
    """(number, sentence) for each number of the lab's prose that nothing accounts for.

    A step number ("step 111", "steps 30 and 60") must also be said of a step in the
    outputs or the code: small integers are everywhere in a lab's output, and "the first
    inf at step 75" must not pass because 75 is printed as a loss or a count."""
    code, outputs = _text(lab)
    own = values(outputs) + values(code) + values(package_defaults())
    lines = (outputs + "\n" + code).splitlines()
    allowed = ARITHMETIC.get(lab, {})
    found = []
    for cell in markdown_cells(lab):
        for sentence, lead in units(cell):
            if SOURCED.search(sentence) or SOURCED.search(lead):
                continue
            others = labs_named(sentence)
            seen = own + [v for other in others for v in values(_text(other)[1])]
            text = REFERENCES.sub(lambda m: m[0] if m[0].lower().startswith("step") else " ",
                                  sentence)
            for match in NUMBER.finditer(text):
                n = match[0]
                if n in allowed or agrees(n, CONSTANTS):
                    continue
                ok = agrees(n, seen)
                if ok and not others and re.search(r"\bsteps?\s+$", text[:match.start()]):
                    ok = said_of_a_step(n, lines)
                if not ok:
                    found.append((n, " ".join(sentence.split())[:160]))
    return found


@pytest.mark.parametrize("lab", LABS)
def test_every_number_in_a_labs_prose_is_read_from_its_run(lab):
    if not (SOLUTIONS / f"{lab}.ipynb").exists():
        pytest.skip(f"{lab} has no executed notebook")
    stale = stale_numbers(lab)
    assert not stale, f"{lab}: numbers in no output, no code and no named source:\n" + \
        "\n".join(f"  {n!r} in: {s}" for n, s in stale)


# Stale sentences of the kind issue 28 found (Lab 00 said Lab 05's stack "blows up at
# step 78" when Lab 05 printed 111; Lab 05 said "the climb showed about 50 steps before"),
# and a number quoted from another lab's run: each planted into a lab's prose is caught.
PLANTED = [
    ("00_start_here", "Lab 05's deep stack blows up at step 78 on one thread.", "78"),
    ("05_init_depth", "The first inf comes at step 78 on one thread.", "78"),
    ("05_init_depth", "The grad norm climbed for about 47 steps before the first inf.", "47"),
    ("02_dirty_data", "A forward op passes fp16's range (Lab 07's run: loss 0.61, then inf).",
     "0.61"),
    ("08_guard_recovery", "Stopping at step 30 saved 68 steps.", "68"),
]


@pytest.mark.parametrize(("lab", "sentence", "stale"), PLANTED, ids=lambda x: str(x)[:20])
def test_a_planted_stale_number_is_caught(monkeypatch, lab, sentence, stale):
    cells = markdown_cells(lab)
    monkeypatch.setattr(__import__(__name__), "markdown_cells",
                        lambda name: cells + [sentence] if name == lab else cells)
    assert (stale, sentence) in stale_numbers(lab)


def test_a_true_number_from_another_lab_passes(monkeypatch):
    """The same sentence with the number Lab 07's run printed is accounted for."""
    cells = markdown_cells("02_dirty_data")
    sentence = "A forward op passes fp16's range (Lab 07's run: loss 0.54, then inf)."
    monkeypatch.setattr(__import__(__name__), "markdown_cells", lambda name: cells + [sentence])
    assert stale_numbers("02_dirty_data") == []
