"""Draw docs/images/report.svg: `atlas report` on the bundled example, as an 80-column terminal shows it.

python docs/scripts/make_picture.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.text import Text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "h100_bert_small_infer.json.gz"
OUT = ROOT / "docs" / "images" / "report.svg"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / EXAMPLE.name
        shutil.copy(EXAMPLE, trace)
        env = {**os.environ, "COLUMNS": "80", "FORCE_COLOR": "1", "TERM": "xterm-256color"}
        atlas = [str(Path(sys.executable).with_name("atlas"))]
        subprocess.run([*atlas, "ingest", str(trace), "-q"], check=True, env=env, capture_output=True)
        shown = subprocess.run(
            [*atlas, "report", str(trace.with_name("h100_bert_small_infer.atlas")), "--top", "6"],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
    console = Console(record=True, width=80, file=open(os.devnull, "w"), force_terminal=True)  # noqa: SIM115
    console.print(Text.from_ansi(shown.replace(tmp, "/tmp")))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    console.save_svg(str(OUT), title="atlas report h100_bert_small_infer.atlas")
    return 0


if __name__ == "__main__":
    sys.exit(main())
