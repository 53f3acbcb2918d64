"""`robostream train`'s main() on each case's flags (a JSON object: name -> argv) in this process, one after another:
what each raised (or `no error`) and what it printed on stderr (draccus's usage errors), as one JSON line.

    python main_errors.py CASES_JSON
"""

import contextlib
import io
import json
import sys

from help_cache import cache_help_text  # this folder is first on sys.path

from robostream.lerobot.train import main

cache_help_text()  # the cases' parses look the flags' help text up once

errors, stderr = {}, {}
for name, args in json.loads(sys.argv[1]).items():
    sys.argv = ["robostream train", *args]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            main()
        errors[name] = "no error"
    except SystemExit as exc:
        errors[name] = f"SystemExit {exc.code}"
    except Exception as exc:  # the case's outcome, reported to the test
        errors[name] = f"{type(exc).__name__}: {exc} {getattr(exc, '__notes__', '')}"
    stderr[name] = printed.getvalue()
print(json.dumps({"errors": errors, "stderr": stderr}))
