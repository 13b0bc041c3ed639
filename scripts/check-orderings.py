#!/usr/bin/env python3
"""Every non-Relaxed atomic ordering in src/ names what it pairs with.

A use of Acquire, Release, AcqRel or SeqCst passes when a comment saying
"pairs with" (any case) stands on its line or within the WINDOW lines
above it: the habit ARCHITECTURE.md states, checked. The counting wrapper
(src/sync/rmw_count.rs) passes orderings through and is exempt, as are the
unit-test files. Prints each unnamed use; exits 1 if there is any.
"""
import pathlib
import re
import sys

WINDOW = 10
ORDERING = re.compile(r"\b(Acquire|Release|AcqRel|SeqCst)\b")
NAMED = re.compile(r"pairs? with", re.IGNORECASE)
EXEMPT = {"src/sync/rmw_count.rs", "src/list/tests.rs", "src/pool/block_pool/tests.rs"}

root = pathlib.Path(__file__).resolve().parent.parent
bad = 0
for path in sorted((root / "src").rglob("*.rs")):
    rel = path.relative_to(root).as_posix()
    if rel in EXEMPT:
        continue
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if not ORDERING.search(code) or code.lstrip().startswith(("use ", "pub use ")):
            continue
        window = lines[max(0, i - WINDOW) : i + 1]
        if not any(NAMED.search(l) for l in window):
            print(f"{rel}:{i + 1}: {line.strip()}")
            bad += 1
if bad:
    print(f"{bad} non-Relaxed orderings name nothing they pair with", file=sys.stderr)
    sys.exit(1)
