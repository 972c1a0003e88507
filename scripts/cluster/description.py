"""The cluster description: a JSON file that says what the machine and its job system are.

Every key is documented in configs/cluster/README.md. Unknown keys are errors that list the valid
keys of their section; values of the wrong type or out of range are errors that name the key.
Python 3 standard library only: this runs on login nodes without packages or a venv.
"""
import json
import re

SCHEDULERS = ("slurm", "pbs", "pjm", "uge", "none")
MPI_FLAVOURS = ("openmpi", "mpich", "intel", "fujitsu")
DEFAULT_LAUNCHER = {"openmpi": "mpirun", "mpich": "mpiexec", "intel": "mpiexec", "fujitsu": "mpiexec"}


class DescriptionError(Exception):
    """A bad cluster description: the message names the file and the key."""


# key: (type, default); a default of REQUIRED makes the key mandatory.
REQUIRED = object()
TOP = {
    "name": (str, "hpcnn"),
    "scheduler": (str, REQUIRED),
    "nodes": (int, REQUIRED),
    "ranks_per_node": (int, REQUIRED),
    "cores_per_node": (int, REQUIRED),
    "gpus_per_node": (int, 0),
    "threads_per_rank": (int, 0),
    "queue": (str, ""),
    "account": (str, ""),
    "wall_time": (str, "01:00:00"),
    "scratch": (str, REQUIRED),
    "shared": (str, ""),
    "hostfile": (str, ""),
    "modules": (list, []),
    "setup": (list, []),
    "environment": (dict, {}),
    "directives": (list, []),
    "resource_type": (str, ""),
    "parallel_environment": (str, ""),
    "cuda_version": (str, ""),
    "nccl_version": (str, ""),
    "mpi": (dict, {}),
    "stage": (dict, {}),
}
MPI = {
    "flavour": (str, "openmpi"),
    "launcher": (str, ""),
    "version": (str, ""),
    "bind": (str, "core"),
    "args": (list, []),
}
STAGE = {
    "data": (bool, True),
    "binaries": (bool, True),
    "libraries": (bool, False),
    "compress": (str, "huffgpu"),
    "cleanup": (bool, True),
}


def _fill(section, schema, where, origin):
    if not isinstance(section, dict):
        raise DescriptionError(f"{origin}: '{where or 'the description'}' must be a JSON object")
    unknown = sorted(set(section) - set(schema))
    if unknown:
        raise DescriptionError(f"{origin}: unknown key '{where}{unknown[0]}' (valid keys: {', '.join(schema)})")
    out = {}
    for key, (kind, default) in schema.items():
        name = where + key
        if key not in section:
            if default is REQUIRED:
                raise DescriptionError(f"{origin}: key '{name}' is required")
            out[key] = json.loads(json.dumps(default))  # a copy
            continue
        value = section[key]
        # bool is an int in Python: reject true/false where a number is meant, and the reverse.
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise DescriptionError(f"{origin}: '{name}' must be an integer, not {json.dumps(value)}")
        if kind is not int and not isinstance(value, kind):
            raise DescriptionError(f"{origin}: '{name}' must be a JSON {kind.__name__}, not {json.dumps(value)}")
        out[key] = value
    return out


def _strings(values, name, origin):
    for v in values:
        if not isinstance(v, str):
            raise DescriptionError(f"{origin}: '{name}' must hold strings, not {json.dumps(v)}")
        if "\n" in v or "\r" in v:
            raise DescriptionError(f"{origin}: '{name}' entries are single lines, not {json.dumps(v)}")


def validate(raw, origin="cluster description"):
    """The description with every default filled in, or DescriptionError."""
    d = _fill(raw, TOP, "", origin)
    d["mpi"] = _fill(d["mpi"], MPI, "mpi.", origin)
    d["stage"] = _fill(d["stage"], STAGE, "stage.", origin)
    if d["scheduler"] not in SCHEDULERS:
        raise DescriptionError(f"{origin}: 'scheduler' must be one of {', '.join(SCHEDULERS)}, not '{d['scheduler']}'")
    # Upper bounds far above any machine, so that nonsense fails here and not as an overflow on a node.
    for key, low, high in (("nodes", 1, 1 << 20), ("ranks_per_node", 1, 4096), ("cores_per_node", 1, 1 << 16),
                           ("gpus_per_node", 0, 1024), ("threads_per_rank", 0, 1 << 16)):
        if not low <= d[key] <= high:
            raise DescriptionError(f"{origin}: '{key}' must be in [{low}, {high}], not {d[key]}")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", d["name"]):
        raise DescriptionError(f"{origin}: 'name' must be letters, digits, '_', '.', '-', not '{d['name']}'")
    m = re.fullmatch(r"(\d+):([0-5]\d):([0-5]\d)", d["wall_time"])
    if not m:
        raise DescriptionError(f"{origin}: 'wall_time' must be HH:MM:SS, not '{d['wall_time']}'")
    if d["threads_per_rank"] == 0:
        d["threads_per_rank"] = max(1, d["cores_per_node"] // d["ranks_per_node"])
    if d["ranks_per_node"] * d["threads_per_rank"] > d["cores_per_node"]:
        raise DescriptionError(
            f"{origin}: ranks_per_node x threads_per_rank = {d['ranks_per_node']} x {d['threads_per_rank']} = "
            f"{d['ranks_per_node'] * d['threads_per_rank']} exceeds cores_per_node = {d['cores_per_node']}")
    if d["gpus_per_node"] and d["ranks_per_node"] > d["gpus_per_node"]:
        raise DescriptionError(f"{origin}: one GPU per rank: ranks_per_node = {d['ranks_per_node']} exceeds "
                               f"gpus_per_node = {d['gpus_per_node']}")
    if any(c in d["scratch"] for c in "\"\\\n"):
        raise DescriptionError(f"{origin}: 'scratch' must not contain quotes, backslashes or newlines")
    if not d["scratch"].startswith(("/", "${")):
        raise DescriptionError(f"{origin}: 'scratch' must be an absolute path (or start with ${{VAR}}), not '{d['scratch']}'")
    for key in ("modules", "setup", "directives"):
        _strings(d[key], key, origin)
    for k, v in d["environment"].items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise DescriptionError(f"{origin}: 'environment' key '{k}' is not a variable name")
        if not isinstance(v, str) or "\n" in v:
            raise DescriptionError(f"{origin}: 'environment.{k}' must be a one-line string, not {json.dumps(v)}")
    for key in ("queue", "account", "resource_type", "parallel_environment", "hostfile", "cuda_version", "nccl_version"):
        if any(c in d[key] for c in "\n\r\"'\\ "):
            raise DescriptionError(f"{origin}: '{key}' must be one word without quotes, not {json.dumps(d[key])}")
    mpi = d["mpi"]
    if mpi["flavour"] not in MPI_FLAVOURS:
        raise DescriptionError(f"{origin}: 'mpi.flavour' must be one of {', '.join(MPI_FLAVOURS)}, not '{mpi['flavour']}'")
    if mpi["bind"] not in ("core", "none"):
        raise DescriptionError(f"{origin}: 'mpi.bind' must be 'core' or 'none', not '{mpi['bind']}'")
    _strings(mpi["args"], "mpi.args", origin)
    mpi["launcher"] = mpi["launcher"] or DEFAULT_LAUNCHER[mpi["flavour"]]
    if d["scheduler"] == "pjm" and mpi["flavour"] != "fujitsu":
        raise DescriptionError(f"{origin}: scheduler 'pjm' (Fugaku) runs Fujitsu MPI: set mpi.flavour to 'fujitsu'")
    if d["scheduler"] == "none" and d["nodes"] > 1 and not d["hostfile"]:
        raise DescriptionError(f"{origin}: scheduler 'none' with {d['nodes']} nodes needs 'hostfile'")
    if d["stage"]["compress"] not in ("huffgpu", "keep"):
        raise DescriptionError(f"{origin}: 'stage.compress' must be 'huffgpu' or 'keep', not '{d['stage']['compress']}'")
    if d["scheduler"] == "uge" and not (d["resource_type"] or d["parallel_environment"]):
        raise DescriptionError(f"{origin}: scheduler 'uge' needs 'resource_type' (ABCI: rt_F) or 'parallel_environment'")
    return d


def load(path):
    """Reads and validates a cluster description file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as e:
        raise DescriptionError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise DescriptionError(f"{path}: not JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except UnicodeDecodeError as e:
        raise DescriptionError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return validate(raw, path)


def total_ranks(d):
    return d["nodes"] * d["ranks_per_node"]
