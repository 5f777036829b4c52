"""`python -m wanda ARGS`: runs the installed `wanda` binary with ARGS."""

import os
import subprocess
import sys

from wanda import find_wanda_bin


def main() -> None:
    binary = find_wanda_bin()
    if os.name == "posix":
        os.execv(binary, [binary, *sys.argv[1:]])
    sys.exit(subprocess.run([binary, *sys.argv[1:]]).returncode)


if __name__ == "__main__":
    main()
