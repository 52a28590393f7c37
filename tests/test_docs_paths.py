"""docs/finetuning.md's commands paste on any machine: they name no folder of the one its runs happened on."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A home, its cache or a temporary folder, written out absolutely (`$HOME/...` and relative paths are fine).
MACHINE_FOLDERS = re.compile(r"(?<![\w$.~-])/(?:tmp|root|home|Users|var/folders)/[^\s`]*")


def test_finetuning_page_names_no_machine_folder():
    text = (ROOT / "docs" / "finetuning.md").read_text(encoding="utf-8")
    assert MACHINE_FOLDERS.findall(text) == []
