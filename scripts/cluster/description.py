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
    "allreduce": (str, ""),
}
# mpi.allreduce (Open MPI 4.1): "han" raises coll/han's priority (0 in 4.1: never chosen unless
# raised); "tuned:NAME" fixes coll/tuned's allreduce algorithm (its dynamic rules, numbered as
# ompi_info --param coll tuned --level 9 lists them).
TUNED_ALLREDUCE = {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4, "segmented_ring": 5,
                   "rabenseifner": 6}
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


# What each job system accepts in the values the launcher writes into its directives
# (schedulers.directives: name, queue, account, wall_time, resource_type, parallel_environment),
# checked here so that a value the job system rejects fails on the login node, before any job
# folder is made, and not at submission or in the queue. The job folder in the output directive is
# checked by schedulers.check_job_dir. Sources:
#  slurm  slurmctld refuses a job name, partition or account over 1024 characters (_test_strlen() in
#         src/slurmctld/job_mgr.c, https://github.com/SchedMD/slurm); no rule on the first character.
#         sbatch ends a #SBATCH line at an unquoted '#' (get_argument() in src/sbatch/opt.c).
#  pbs    PBS Pro / OpenPBS qsub -N: at most PBS_MAXJOBNAME = 230 characters (src/include/pbs_ifl.h;
#         pbs_job_attributes(7B) says 236), letters, digits and '-_+.' (check_job_name() in
#         src/lib/Libcmds/ck_job_name.c); a digit first is accepted for a new job (verify_value_jobname()
#         in src/lib/Libecl/ecl_verify_values.c; pbs_job_attributes(7B): "first character must be
#         alphabetic or numeric"; https://github.com/openpbs/openpbs). Queue names (-q QUEUE[@SERVER])
#         have at most PBS_MAXQUEUENAME = 15 characters.
#  pjm    Fugaku User Guide 5.9.1, pjsub options: "--name: a job name of up to 63 bytes"
#         (https://www.r-ccs.riken.jp/fugaku/docs/user-guide/sys-use/user-guide-use-1.49/build/ja/JobExecution/pjsubCommandOptions.html);
#         -L "resource=value[,...]" is a comma-separated list, so a resource group (rscgrp) has no ',' or '='.
#  uge    submit(1) -N: the job name follows sge_types(1) "name": no "\n", "\t", "\r", "/", ":", "@", "\\",
#         "*" or "?"; qmaster refuses a name that starts with a digit ("is not a valid object name
#         (cannot start with a digit)", object_verify_name() in source/libs/sgeobj/sge_object.c), the
#         keywords NONE, ALL and TEMPLATE and names over 512 characters (verify_str_key() in
#         source/libs/sgeobj/sge_utility.c, https://github.com/gridengine/gridengine). Resource types
#         (complex names, -l TYPE=N) and parallel environment names are sge_types(5) object_name: no
#         space, '/', ':', '\'', '\\', '[', ']', '{', '}', '|', '(', ')', '@', '%', ',' or '"'
#         (https://manpages.ubuntu.com/manpages/focal/man5/sge_types.5.html). A '#' ends a '#$'
#         line (parse_script_file() in source/common/parse_job_cull.c).
def _scheduler_rules(d, origin):
    s = d["scheduler"]
    if s == "none":
        return
    label = {"slurm": "Slurm", "pbs": "PBS Pro", "pjm": "Fujitsu PJM", "uge": "Grid Engine"}[s]

    def refuse(key, rule):
        raise DescriptionError(f"{origin}: {label} (scheduler '{s}') does not accept '{key}' {json.dumps(d[key])}: {rule}")

    h, m, sec = map(int, d["wall_time"].split(":"))
    if h == m == sec == 0:
        refuse("wall_time", "zero is no time limit for a job (sbatch(1): --time=0 even means none at all)")
    for key in ("queue", "account", "resource_type", "parallel_environment"):
        if "#" in d[key]:
            refuse(key, "a '#' starts a comment in a directive line")
    name = d["name"]
    if s == "slurm":
        for key in ("name", "queue", "account"):
            if len(d[key]) > 1024:
                refuse(key, "at most 1024 characters (slurmctld)")
    elif s == "pbs":
        if len(name) > 230:
            refuse("name", "a PBS job name (qsub -N) has at most 230 characters")
        if len(d["queue"].split("@")[0]) > 15:
            refuse("queue", "a PBS queue name has at most 15 characters (qsub -q QUEUE[@SERVER])")
    elif s == "pjm":
        if len(name.encode()) > 63:
            refuse("name", "a PJM job name (pjsub -N) has at most 63 bytes")
        if any(c in d["queue"] for c in ",="):
            refuse("queue", "the resource group goes into #PJM -L \"rscgrp=...\", a comma-separated list of "
                   "resource=value: no ',' or '='")
    elif s == "uge":
        if name[0].isdigit():
            refuse("name", "a Grid Engine job name (qsub -N) must not start with a digit (qmaster: \"is not a valid "
                   "object name (cannot start with a digit)\"); e.g. put a letter first")
        if name.upper() in ("NONE", "ALL", "TEMPLATE"):
            refuse("name", "NONE, ALL and TEMPLATE are Grid Engine keywords, not job names")
        if len(name) > 512:
            refuse("name", "a Grid Engine job name has at most 512 characters")
        for key in ("resource_type", "parallel_environment"):
            bad = sorted(set(c for c in d[key] if c in " /:'\\[]{}|()@%,\"\u00b4"))
            if bad or d[key][:1] in (".", "#") or len(d[key]) > 512:
                refuse(key, "a Grid Engine object name (sge_types(5)) has at most 512 characters, does not start with "
                       "'.' or '#' and has none of / : ' \\ [ ] { } | ( ) @ % , \" \u00b4" +
                       (f" (it has {' '.join(bad)})" if bad else ""))


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
    if mpi["allreduce"]:
        choices = ["han"] + [f"tuned:{n}" for n in TUNED_ALLREDUCE]
        if mpi["allreduce"] not in choices:
            raise DescriptionError(f"{origin}: 'mpi.allreduce' must be \"\" (the MPI's own choice) or one of "
                                   f"{', '.join(choices)}, not {json.dumps(mpi['allreduce'])}")
        if mpi["flavour"] != "openmpi":
            raise DescriptionError(f"{origin}: 'mpi.allreduce' sets Open MPI's collective components; mpi.flavour is "
                                   f"'{mpi['flavour']}' (set its own variables in 'environment', e.g. I_MPI_ADJUST_ALLREDUCE)")
    mpi["launcher"] = mpi["launcher"] or DEFAULT_LAUNCHER[mpi["flavour"]]
    if d["scheduler"] == "pjm" and mpi["flavour"] != "fujitsu":
        raise DescriptionError(f"{origin}: scheduler 'pjm' (Fugaku) runs Fujitsu MPI: set mpi.flavour to 'fujitsu'")
    if d["scheduler"] == "none" and d["nodes"] > 1 and not d["hostfile"]:
        raise DescriptionError(f"{origin}: scheduler 'none' with {d['nodes']} nodes needs 'hostfile'")
    if d["stage"]["compress"] not in ("huffgpu", "keep"):
        raise DescriptionError(f"{origin}: 'stage.compress' must be 'huffgpu' or 'keep', not '{d['stage']['compress']}'")
    if d["scheduler"] == "uge" and not (d["resource_type"] or d["parallel_environment"]):
        raise DescriptionError(f"{origin}: scheduler 'uge' needs 'resource_type' (ABCI: rt_F) or 'parallel_environment'")
    _scheduler_rules(d, origin)
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
