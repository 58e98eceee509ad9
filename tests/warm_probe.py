"""A command for tests/test_warm.py: says what it sees as ``python -m tests.warm_probe`` and exits as asked.

python -m tests.warm_probe CODE        # prints its argv, cwd, __name__ and parent on stdout, a line on stderr
python -m tests.warm_probe kill        # ends by SIGTERM
python -m tests.warm_probe sleep       # sleeps until killed (first creating NUMPREC_PROBE_READY's file, if set)
"""

import gc
import json
import os
import signal
import sys
import time

if __name__ == "__main__":
    numprec = {name: value for name, value in os.environ.items() if name.startswith("NUMPREC_")}
    seen = {"argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "torch": "torch" in sys.modules}
    seen["collectable"] = len(gc.get_objects())  # what a collection (the one at exit among them) walks
    print(json.dumps({**seen, "numprec": numprec}))
    print("a line on stderr\r\nand a bar\rredrawn", file=sys.stderr)
    if sys.argv[1] == "kill":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGTERM)
    if sys.argv[1] == "sleep":
        sys.stdout.flush()
        if os.environ.get("NUMPREC_PROBE_READY"):
            open(os.environ["NUMPREC_PROBE_READY"], "w").close()
        time.sleep(600)
    sys.exit(int(sys.argv[1]))
