"""The `wanda` command, installed by the `wanda-prune` wheel.

The wheel puts the Rust binary on PATH as `wanda`; this package only finds it, so that
`python -m wanda ...` runs the same command.
"""

import os
import sys
import sysconfig


def find_wanda_bin() -> str:
    """The path of the `wanda` binary this package was installed with."""
    name = "wanda.exe" if os.name == "nt" else "wanda"
    schemes = [sysconfig.get_path("scripts")]
    user_scheme = {"nt": "nt_user", "posix": "posix_user"}.get(os.name)
    if user_scheme and user_scheme in sysconfig.get_scheme_names():
        schemes.append(sysconfig.get_path("scripts", scheme=user_scheme))
    schemes.append(os.path.dirname(sys.executable))
    for folder in schemes:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"the `wanda` binary is not in {', '.join(schemes)}; reinstall with "
        "`pip install --force-reinstall wanda-prune`"
    )
