"""The claims map: every claim of the article is covered by a lab section that exists."""

import re
from pathlib import Path

import pytest

from nanlab.course import claims

ROOT = Path(__file__).resolve().parents[1]
BRIEF = ROOT.parent / "shared" / "brief" / "CLAIMS.md"


def test_every_claim_is_covered_by_an_existing_lab_section():
    assert claims.problems(ROOT / "solutions") == []


def test_a_missing_heading_or_an_uncovered_claim_is_reported(monkeypatch):
    broken = (claims.Claim("C1", "t", "s", "reproduced", (("03_learning_rate", "## Nope"),),
                           "measured"),
              claims.Claim("C2", "t", "s", "reproduced", (), "measured"),
              claims.Claim("C3", "t", "s", "reproduced", (("99_missing", "## Setup"),),
                           "measured"),
              claims.Claim("C4", "t", "s", "reproduced", (("03_learning_rate", "## Setup"),)))
    monkeypatch.setattr(claims, "CLAIMS", broken)
    found = claims.problems(ROOT / "solutions")
    assert found[0] == "C1: " + str(ROOT / "solutions" / "03_learning_rate.ipynb") \
        + " has no heading '## Nope'"
    assert found[1] == "C2: covered by no lab"
    assert found[2].startswith("C3: ") and found[2].endswith("does not exist")
    assert found[3] == "C4: no measured finding"


def test_ids_are_unique_and_verdicts_known():
    ids = [c.id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids))
    assert {c.verdict for c in claims.CLAIMS} <= {"reproduced", "corrected", "extended"}
    assert {c.id[0] for c in claims.CLAIMS} == set(claims.GROUPS)


def test_unknown_id_is_a_clear_error():
    with pytest.raises(claims.ClaimError, match="unknown claim id 'X9'; known ids: C1, C2"):
        claims.get("X9")


def test_docs_claims_md_is_generated_from_the_list():
    assert (ROOT / "docs" / "claims.md").read_text(encoding="utf-8") == claims.markdown()


@pytest.mark.skipif(not BRIEF.exists(), reason="the course brief is not beside this clone")
def test_the_list_has_every_id_of_the_brief():
    brief_ids = set(re.findall(r"^\| ([CBMVI]\d+) \|", BRIEF.read_text(encoding="utf-8"), re.M))
    ours = {c.id for c in claims.CLAIMS}
    assert brief_ids and brief_ids <= ours, sorted(brief_ids - ours)


# ------------------------------------------------- numbers read from the executed labs
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _lab_text(lab: str) -> str:
    """Everything a learner reads in the executed solution notebook: cell text, outputs."""
    import json

    nb = json.loads((ROOT / "solutions" / f"{lab}.ipynb").read_text(encoding="utf-8"))
    texts = []
    for cell in nb["cells"]:
        texts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            plain = out.get("data", {}).get("text/plain", "")
            texts.append("".join(plain) if isinstance(plain, list) else plain)
    return "\n".join(texts)


def _agrees(quoted: str, seen: list[float]) -> bool:
    """``quoted`` is one of ``seen`` written to its own precision (0.82 for 0.824, 1.3e4
    for 1.258e+04): within half a unit of its last digit."""
    mantissa = quoted.lower().split("e")[0]
    exponent = int(quoted.lower().split("e")[1]) if "e" in quoted.lower() else 0
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    half = 0.5 * 10.0 ** (exponent - decimals) * (1 + 1e-9)
    value = float(quoted)
    return any(abs(value - s) <= half for s in seen)


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_every_number_in_a_finding_is_read_in_its_labs(claim):
    """A claim's "found" line quotes its labs' runs: each number in it appears, to the
    precision quoted, in the executed notebooks it points to (text or output). A number
    pasted once and left behind when the lab's run changed fails here."""
    labs = sorted({lab for lab, _ in claim.where})
    text = "\n".join(_lab_text(lab) for lab in labs)
    seen = [float(n) for n in NUMBER.findall(text)]
    stale = [n for n in NUMBER.findall(claim.found) if not _agrees(n, seen)]
    assert not stale, f"{claim.id}: {stale} appear in no output of {labs}"
