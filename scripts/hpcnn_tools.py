"""Where the hpcnn tools are, and how a script launches them under mpirun: the Python twin of
scripts/tools.sh (the bash scripts source that one; the Python programs import this one). Standard
library only.

  tool(name)       the tool's path: with HPCNN_BIN set, HPCNN_BIN/NAME/NAME (a build tree's tools/)
                   or HPCNN_BIN/NAME (an installed bin/); without it, this repository's
                   build/tools/NAME/NAME when built, else NAME on PATH (tools installed by
                   `cmake --install`, a loaded module). Raises ToolNotFound, whose message says where
                   it looked.
  launch(ranks)    the argv prefix that runs a command on RANKS ranks: [] for one rank, else
                   MPIRUN (default mpirun) --oversubscribe -np RANKS, plus --allow-run-as-root as
                   root (Open MPI refuses root otherwise).
"""
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ToolNotFound(Exception):
    pass


def tool(name):
    bin_dir = os.environ.get("HPCNN_BIN", "")
    if bin_dir:
        for p in (os.path.join(bin_dir, name, name), os.path.join(bin_dir, name)):
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        raise ToolNotFound(f"no {name} in HPCNN_BIN={bin_dir} (neither {bin_dir}/{name}/{name} nor {bin_dir}/{name})")
    built = os.path.join(ROOT, "build", "tools", name, name)
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return built
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise ToolNotFound(f"no {name}: not built in {ROOT}/build/tools (bash scripts/build.sh) and not on PATH "
                       "(cmake --install, module load hpcnn), HPCNN_BIN unset")


def launch(ranks):
    if ranks <= 1:
        return []
    prefix = [os.environ.get("MPIRUN") or "mpirun", "--oversubscribe", "-np", str(ranks)]
    if os.geteuid() == 0:
        prefix.append("--allow-run-as-root")
    return prefix
