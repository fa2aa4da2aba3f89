"""docs/accuracy.md is written by two runs: the single-rank suite (benchmarks/accuracy.py main) and the sharded
suite (run_sharded). Each owns a section; the sharded one sits between SHARDED_BEGIN / SHARDED_END and the
single-rank writer must keep it. Both sides write through `write_section`.

    write_section(path, text)                      # single-rank: replace everything outside the markers
    write_section(path, text, sharded=True)        # sharded: replace what is between the markers
"""

from __future__ import annotations

from pathlib import Path

SHARDED_BEGIN = "<!-- sharded:begin -->"
SHARDED_END = "<!-- sharded:end -->"
# A hand-written section (the issue-14 families: counts and tests/measure/test_eager_families.py figures) that
# neither writer owns: kept as it is, at the end of the document.
KEPT_BEGIN = "<!-- families:begin -->"
KEPT_END = "<!-- families:end -->"


def _take_kept(doc: str) -> tuple[str, str]:
    """(doc without the kept section, the kept section with its markers or "")."""
    if KEPT_BEGIN not in doc or KEPT_END not in doc:
        return doc, ""
    before, rest = doc.split(KEPT_BEGIN, 1)
    inner, after = rest.split(KEPT_END, 1)
    return before.rstrip("\n") + "\n" + after.lstrip("\n"), f"{KEPT_BEGIN}{inner}{KEPT_END}\n"


def split(doc: str) -> tuple[str, str, str]:
    """(before, sharded section without markers, after); the section is "" when the markers are absent."""
    if SHARDED_BEGIN not in doc or SHARDED_END not in doc:
        return doc.rstrip("\n") + "\n", "", ""
    before, rest = doc.split(SHARDED_BEGIN, 1)
    inner, after = rest.split(SHARDED_END, 1)
    return before, inner.strip("\n"), after


def join(main: str, sharded: str, after: str = "") -> str:
    if not sharded:
        return main.rstrip("\n") + "\n" + after
    return f"{main.rstrip(chr(10))}\n\n{SHARDED_BEGIN}\n{sharded.strip(chr(10))}\n{SHARDED_END}\n{after.lstrip(chr(10))}"


def write_section(path: Path, text: str, sharded: bool = False) -> None:
    """Write one side's section of `path`, keeping the other side's."""
    old, kept = _take_kept(path.read_text() if path.exists() else "")
    before, inner, after = split(old)
    new = join(before, text, after) if sharded else join(text, inner, "")
    path.write_text(new.rstrip("\n") + "\n" + (f"\n{kept}" if kept else ""))
