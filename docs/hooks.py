"""MkDocs hooks for the nanlab site (``mkdocs.yml``: ``hooks``).

- The labs are rendered from the executed solution notebooks where they live: each
  ``solutions/NN_name.ipynb`` becomes the page ``solutions/NN_name/`` (mkdocs-jupyter
  renders it, figures included), so the site never holds a second copy to go stale.
- ``docs/claims.md`` is generated for reading on GitHub, where its links go up to
  ``../solutions/``; on the site they go to the rendered lab pages.
- The labs' Markdown is read as JupyterLab reads it: ``#291`` at the start of a line is
  text, not a heading (nbconvert alone makes it one).
- ``<!-- nanlab:fault-catalogue -->`` in a page becomes the table of every registered
  fault, read from ``nanlab.faults.FAULTS`` at build time; ``<!-- nanlab:fix-table -->``
  the table of every fix by the SOP step that leads to it, from ``nanlab.faults.FIXES``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
CATALOGUE_MARK = "<!-- nanlab:fault-catalogue -->"
FIX_TABLE_MARK = "<!-- nanlab:fix-table -->"


def on_config(config):
    # nbconvert accepts a heading without a space after the "#" (the classic Notebook's
    # rule); JupyterLab and CommonMark do not, so "gpt-neox issue\n#291 asked ..." in a
    # lab is a sentence there and an <h1> inside a list item here. Use mistune's own rule.
    from mistune.block_parser import BlockParser
    from nbconvert.filters import markdown_mistune

    parser = markdown_mistune.MathBlockParser
    rule = "atx_heading" if markdown_mistune.MISTUNE_V3_ATX else "axt_heading"
    parser.SPECIFICATION = {**parser.SPECIFICATION, rule: BlockParser.SPECIFICATION[rule]}
    return config


def lab_notebooks() -> list[Path]:
    """The executed solution notebooks, in lab order."""
    return sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files, config):
    # a File read from the repository root (not File.generated, whose source path
    # mkdocs-jupyter's wrapper loses): its page is solutions/NN_name/
    for notebook in lab_notebooks():
        files.append(File(f"solutions/{notebook.name}", str(ROOT), config.site_dir,
                          config.use_directory_urls))
    return files


def fault_catalogue() -> str:
    """One Markdown row per registered fault: family, what it is, the SOP step, the cure."""
    from nanlab.faults import FAULTS

    rows = ["| fault | family | what it is | SOP step that reveals it | cure |",
            "|---|---|---|---|---|"]
    for fault in FAULTS.values():  # the catalogue's order: family by family
        summary = fault.summary.replace("|", "\\|")
        cure = f"`{fault.cure}`" if fault.cure else "none declared"
        rows.append(f"| `{fault.name}` | {fault.family} | {summary} | {fault.reveals} "
                    f"| {cure} |")
    return "\n".join(rows)


def fix_table() -> str:
    """One Markdown row per registered fix, in the SOP's order: the step whose finding
    leads to it, the fix, what it does (the guard's skip, which treats any cause, last)."""
    from nanlab.faults import SOP_STEPS
    from nanlab.faults.fixes import FIXES

    order = [*SOP_STEPS, None]
    rows = ["| SOP step | fix | what it does |", "|---|---|---|"]
    for fix in sorted(FIXES.values(), key=lambda f: order.index(f.sop_step)):
        step = SOP_STEPS[fix.sop_step].split(" (")[0] if fix.sop_step else "(the guard: any cause)"
        summary = fix.summary.replace("|", "\\|")
        rows.append(f"| {step} | `{fix.name}` | {summary} |")
    return "\n".join(rows)


def on_page_content(html, page, config, files):
    # mkdocs-jupyter builds a lab's table of contents from its own Markdown reading, where
    # "#291" is still a heading: keep the entries whose anchor the rendered page has
    if page.file.src_uri.startswith("solutions/"):
        def keep(items):
            kept = [item for item in items if f'id="{item.id}"' in html]
            for item in kept:
                item.children = keep(item.children)
            return kept
        page.toc.items = keep(page.toc.items)
    return html


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "claims.md":
        markdown = markdown.replace("](../solutions/", "](solutions/")
    if CATALOGUE_MARK in markdown:
        markdown = markdown.replace(CATALOGUE_MARK, fault_catalogue())
    if FIX_TABLE_MARK in markdown:
        markdown = markdown.replace(FIX_TABLE_MARK, fix_table())
    return markdown
