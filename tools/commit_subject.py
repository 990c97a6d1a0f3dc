"""Check a commit message's subject line: at most 72 characters, not empty (the project's habit; a
``commit-msg`` hook of .pre-commit-config.yaml).

    python -m tools.commit_subject .git/COMMIT_EDITMSG
"""

from __future__ import annotations

import sys

MAX_SUBJECT = 72


def problem(message: str) -> str | None:
    """Why ``message`` breaks the habit, or None."""
    lines = [ln for ln in message.splitlines() if not ln.startswith("#")]
    subject = lines[0].rstrip() if lines else ""
    if not subject:
        return "the commit message has no subject line"
    if len(subject) > MAX_SUBJECT:
        return (f"the subject is {len(subject)} characters, over {MAX_SUBJECT}: say the what and "
                "why in fewer words and put detail in the body")
    if len(lines) > 1 and lines[1].strip():
        return "leave one blank line between the subject and the body"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tools.commit_subject MESSAGE_FILE", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        why = problem(f.read())
    if why:
        print(f"commit message: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
