"""The README's set-up and test commands, as CI runs them (`.ci/run`), so CI cannot pass where a reader following the
README alone would fail.

`setup` prints the commands of the first bash block under "## Set-up", `test` the first command under "## Tests",
one per line, without their comments.

Example:

>>> page = "## Set-up\\n\\n```bash\\npip install -r requirements.txt  # installs\\n```\\n\\n## Tests\\n\\n```bash\\n" \\
...        "python -m pytest -q  # the suite\\npython -m pytest -q -m slow\\n```\\n"
>>> section_commands(page, "Set-up"), section_commands(page, "Tests")[0]
(['pip install -r requirements.txt'], 'python -m pytest -q')
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section_commands(text: str, heading: str) -> list:
    """The commands of the first bash block under `## heading` (comments and blank lines dropped)."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if match is None:
        raise ValueError(f"README.md: no '## {heading}' section")
    block = re.search(r"^```bash\n(.*?)^```", match.group(1), re.S | re.M)
    if block is None:
        raise ValueError(f"README.md: no ```bash block under '## {heading}'")
    commands = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [command for command in commands if command and not command.startswith("#")]


def main(argv) -> int:
    if len(argv) != 2 or argv[1] not in ("setup", "test"):
        print("usage: python tools/readme_commands.py setup|test", file=sys.stderr)
        return 2
    text = README.read_text(encoding="utf-8")
    commands = section_commands(text, "Set-up") if argv[1] == "setup" else section_commands(text, "Tests")[:1]
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
