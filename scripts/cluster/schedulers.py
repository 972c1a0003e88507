"""What differs between job systems: the job script's directives, the variable that holds the
job id, the host list the MPI launcher reads, and how a job is submitted and its id read back.

Slurm (sbatch), PBS Pro (qsub), Fujitsu PJM as on Fugaku (pjsub), Univa/Altair Grid Engine as on
ABCI (qsub -g GROUP, resource types `-l rt_F=N`) and `none` (plain mpirun over a host file, the
job script run in the background). configs/cluster/README.md shows each one's directives.
"""
import re
import shlex
import subprocess

# The environment variable that holds the job id inside a running job.
JOB_ID_VARIABLE = {"slurm": "SLURM_JOB_ID", "pbs": "PBS_JOBID", "pjm": "PJM_JOBID", "uge": "JOB_ID", "none": "HPCNN_JOB_ID"}
# For messages: "Grid Engine (scheduler 'uge')".
LABEL = {"slurm": "Slurm", "pbs": "PBS Pro", "pjm": "Fujitsu PJM", "uge": "Grid Engine", "none": "no scheduler"}


class JobDirError(ValueError):
    """A job folder the job system cannot take in its output directive: the message says why."""


def _refuse(d, job_dir, directive, why):
    raise JobDirError(f"{LABEL[d['scheduler']]} (scheduler '{d['scheduler']}') cannot take the job folder "
                      f"{job_dir!r} in '{directive}': {why}")


# Characters that need no quoting in any directive (shlex's "safe" set, less '%', which is special
# in Slurm's and PJM's file name patterns).
_PLAIN = re.compile(r"[\w@+=:,./-]*", re.ASCII)


def check_job_dir(d, job_dir):
    """Raises JobDirError when the job folder (an absolute path) cannot be written into the job
    script: for every scheduler a control character (job.sh names the folder in a comment line);
    for each job system, what its output directive cannot express (output_directive). The shell
    lines quote the folder (jobdir.py), so spaces and other shell characters are fine there."""
    if re.search(r"[\x00-\x1f\x7f]", job_dir):
        raise JobDirError(f"the job folder {job_dir!r} has a control character (newline, tab, ...), which would end a "
                          "line of the job script")
    output_directive(d, job_dir)


def output_directive(d, job_dir):
    """The job output line (#SBATCH --output, #PBS -o, #PJM -o, #$ -o) for the job folder, quoted as
    the job system's directive parser reads it; JobDirError where that parser cannot express the
    path. None for scheduler `none`. Paths of letters, digits and _@+=:,./- are written as they are."""
    s = d["scheduler"]
    if s == "slurm":
        # sbatch reads a #SBATCH line as a command line: get_argument() in src/sbatch/opt.c (Slurm
        # 22.05 to 25.x) groups characters in '...' or "..." (whitespace included), takes the
        # character after a backslash as it is, and ends the line at an unquoted '#'. The output
        # file name is a pattern (sbatch(1), FILENAME PATTERN): '%%' is a '%', and a backslash
        # anywhere turns the whole pattern off (expand_stdio_fields() in src/common/print_fields.c
        # drops every backslash and expands nothing, so %j would stay "%j").
        # Checked with Debian's sbatch 22.05.8: "#SBATCH --output=/a/my runs/x" fails with
        # "Invalid directive found in batch script: runs/x"; the quoted form parses.
        if "\\" in job_dir:
            _refuse(d, job_dir, "#SBATCH --output", "Slurm drops backslashes from an output path and then expands no "
                    "%j (sbatch(1), FILENAME PATTERN)")
        path = job_dir.replace("%", "%%") + "/out/job.%j.out"
        if not _PLAIN.fullmatch(job_dir):
            path = '"' + path.replace('"', '\\"') + '"'
        return f"#SBATCH --output={path}"
    if s == "pbs":
        # qsub reads a #PBS line with make_argv() (OpenPBS src/cmds/qsub.c): '...' and "..." group
        # characters (no escapes inside), a backslash outside quotes takes the next character, and
        # quoted pieces next to each other make one word; the -o path must then be printable ASCII
        # (prepare_path(), src/lib/Libcmds/prepare_path.c: isprint). '#' is not special there; a
        # ':' in an absolute path is read as part of the path, not as "host:".
        if not re.fullmatch(r"[ -~]*", job_dir):
            _refuse(d, job_dir, "#PBS -o", "PBS takes printable ASCII characters only in an output path "
                    "(prepare_path() in OpenPBS)")
        if "\\" in job_dir:
            _refuse(d, job_dir, "#PBS -o", "a backslash in an output path")
        path = job_dir + "/out/job.out"
        if not _PLAIN.fullmatch(job_dir):
            path = '"' + path.replace('"', '"\'"\'"') + '"'
        return f"#PBS -o {path}"
    if s == "pjm":
        # Fujitsu documents no quoting for file names in #PJM lines (the Fugaku user guide quotes
        # only -L and --mpi values), and -o is a pattern with %j: so that a job cannot fail in the
        # queue over its output path, the folder must be letters, digits and "._-/".
        if not re.fullmatch(r"[A-Za-z0-9._/-]*", job_dir):
            bad = sorted(set(re.sub(r"[A-Za-z0-9._/-]", "", job_dir)))
            _refuse(d, job_dir, "#PJM -o", f"PJM documents no quoting of paths in directives, so the job folder must be "
                    f"letters, digits and '._-/' only (it has {' '.join(repr(c) for c in bad)})")
        return f"#PJM -o {job_dir}/out/job.%j.out"
    if s == "uge":
        # Grid Engine reads a '#$' line with parse_script_file() (source/common/parse_job_cull.c):
        # the line ends at the first '#' (quoted or not), words split at whitespace outside '...'
        # or "...", then every quote character is removed (sge_strip_quotes()). -o takes
        # "[[hostname]:]path,..." with $HOME, $USER, $JOB_ID, $JOB_NAME, $HOSTNAME and $TASK_ID
        # expanded, and "if the path contains a ':' without a hostname, a leading ':' has to be
        # specified" (submit(1), -e and -o).
        for c, why in (("#", "Grid Engine ends a #$ line at a '#' (parse_script_file())"),
                       ('"', "Grid Engine removes every quote character from a #$ line"),
                       ("'", "Grid Engine removes every quote character from a #$ line"),
                       (",", "-o takes a comma-separated list of paths (submit(1))"),
                       ("$", "Grid Engine expands $HOME, $USER, $JOB_ID, ... in -o paths (submit(1))"),
                       ("\\", "a backslash in an output path")):
            if c in job_dir:
                _refuse(d, job_dir, "#$ -o", f"{why}; the folder has {c!r}")
        path = job_dir + "/out/job.out"
        if ":" in job_dir:
            path = ":" + path
        if not _PLAIN.fullmatch(job_dir):
            path = f'"{path}"'
        return f"#$ -o {path}"
    return None


def directives(d, job_dir):
    """The scheduler's header lines (#SBATCH, #PBS, #PJM, #$) for description d."""
    s, n, r, t, g = d["scheduler"], d["nodes"], d["ranks_per_node"], d["threads_per_rank"], d["gpus_per_node"]
    name, wall, queue, account = d["name"], d["wall_time"], d["queue"], d["account"]
    out = []
    if s == "slurm":
        out += [f"#SBATCH --job-name={name}", f"#SBATCH --nodes={n}", f"#SBATCH --ntasks-per-node={r}",
                f"#SBATCH --cpus-per-task={t}"]
        if g:
            out.append(f"#SBATCH --gpus-per-node={g}")
        out.append(f"#SBATCH --time={wall}")
        if queue:
            out.append(f"#SBATCH --partition={queue}")
        if account:
            out.append(f"#SBATCH --account={account}")
        out.append(output_directive(d, job_dir))
    elif s == "pbs":
        select = f"select={n}:ncpus={d['cores_per_node']}:mpiprocs={r}:ompthreads={t}" + (f":ngpus={g}" if g else "")
        out += [f"#PBS -N {name}", f"#PBS -l {select}", "#PBS -l place=scatter:excl", f"#PBS -l walltime={wall}"]
        if queue:
            out.append(f"#PBS -q {queue}")
        if account:
            out.append(f"#PBS -A {account}")
        out += ["#PBS -j oe", output_directive(d, job_dir)]
    elif s == "pjm":
        out += [f"#PJM -N {name}", f'#PJM -L "node={n}"']
        if queue:
            out.append(f'#PJM -L "rscgrp={queue}"')
        out += [f'#PJM -L "elapse={wall}"', f'#PJM --mpi "max-proc-per-node={r}"']
        if account:
            out.append(f"#PJM -g {account}")
        out += ["#PJM -j", output_directive(d, job_dir), "#PJM -S"]
    elif s == "uge":
        out.append(f"#$ -N {name}")
        if d["resource_type"]:
            out.append(f"#$ -l {d['resource_type']}={n}")
        else:
            out.append(f"#$ -pe {d['parallel_environment']} {n * r}")
        out.append(f"#$ -l h_rt={wall}")
        if queue:
            out.append(f"#$ -q {queue}")
        out += ["#$ -j y", output_directive(d, job_dir)]
    out += d["directives"]
    return out


def hostfile(d):
    """The host list for the MPI launcher ("" when the launcher finds the nodes itself: Slurm,
    PJM, Grid Engine parallel environments; Open MPI and MPICH read those allocations)."""
    s = d["scheduler"]
    if s == "pbs":
        return "$PBS_NODEFILE"
    if s == "uge" and d["resource_type"]:
        return "$SGE_JOB_HOSTLIST"
    if s == "none":
        return d["hostfile"]
    return ""


def submit_command(d, job_script):
    s = d["scheduler"]
    if s == "slurm":
        return ["sbatch", "--parsable", job_script]
    if s == "pbs":
        return ["qsub", job_script]
    if s == "pjm":
        return ["pjsub", job_script]
    if s == "uge":
        return ["qsub"] + (["-g", d["account"]] if d["account"] else []) + [job_script]
    return ["bash", job_script]


def parse_job_id(scheduler, text):
    """The job id in a submit command's output, or None."""
    text = text.strip()
    patterns = {
        "slurm": r"^(\d+)(;\S+)?$",                 # sbatch --parsable: ID or ID;CLUSTER
        "pbs": r"^(\d+(\.\S+)?)$",                    # 1234.server
        "pjm": r"Job (\d+) submitted",                # [INFO] PJM 0000 pjsub Job 1234 submitted.
        "uge": r"(?:Your job (\d+)|^(\d+)$)",         # Your job 1234 ("name") has been submitted
    }
    m = re.search(patterns[scheduler], text, re.M)
    if not m:
        return None
    return next(g for g in m.groups() if g)


def submit(d, job_script, job_id_for_none, log_path):
    """Submits the job; returns its id. Raises RuntimeError with the scheduler's message."""
    cmd = submit_command(d, job_script)
    if d["scheduler"] == "none":
        import os
        env = dict(os.environ, HPCNN_JOB_ID=job_id_for_none)
        with open(log_path, "ab") as log:
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        return job_id_for_none
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise RuntimeError(f"'{cmd[0]}' not found: submit from a login node of the {d['scheduler']} cluster") from None
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    job_id = parse_job_id(d["scheduler"], p.stdout)
    if job_id is None:
        raise RuntimeError(f"{shlex.join(cmd)}: no job id in its output: {p.stdout.strip()!r}")
    return job_id
