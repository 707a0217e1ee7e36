"""The oracle scripts' commands run one after another in one long-lived process (in .venv-ref).

Starting Python with torch and qwen_tts takes some 6 s on 2 cores, longer than most oracle commands: a test
worker starts this once (tests/tts_oracle.py) and sends each command as one JSON line on stdin,
["qwen_tts_oracle.py" or "qwen_tts_scores.py", [its arguments]]. Each reply is one JSON line,
{"ok": true} or {"ok": false, "error": the traceback}, on the stdout this process started with; whatever the
package prints goes to stderr. Every command loads its checkpoint afresh, as a process of its own would.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import qwen_tts_oracle  # noqa: E402
import qwen_tts_scores  # noqa: E402

MAINS = {"qwen_tts_oracle.py": qwen_tts_oracle.main, "qwen_tts_scores.py": qwen_tts_scores.main}


def release() -> None:
    """Give the command's memory back to the system: the server idles between commands beside test processes
    that load real-width models, and glibc would keep a freed checkpoint's pages."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def serve() -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the package's prints go to stderr, not into the replies
    sys.stdout = sys.stderr
    for line in sys.stdin:
        script, args = json.loads(line)
        try:
            MAINS[script](args)
            reply = {"ok": True}
        except BaseException:  # argparse's SystemExit too: the reply says what failed, the server stays
            reply = {"ok": False, "error": traceback.format_exc()}
        release()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()
