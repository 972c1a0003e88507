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
        out.append(f"#SBATCH --output={job_dir}/out/job.%j.out")
    elif s == "pbs":
        select = f"select={n}:ncpus={d['cores_per_node']}:mpiprocs={r}:ompthreads={t}" + (f":ngpus={g}" if g else "")
        out += [f"#PBS -N {name}", f"#PBS -l {select}", "#PBS -l place=scatter:excl", f"#PBS -l walltime={wall}"]
        if queue:
            out.append(f"#PBS -q {queue}")
        if account:
            out.append(f"#PBS -A {account}")
        out += ["#PBS -j oe", f"#PBS -o {job_dir}/out/job.out"]
    elif s == "pjm":
        out += [f"#PJM -N {name}", f'#PJM -L "node={n}"']
        if queue:
            out.append(f'#PJM -L "rscgrp={queue}"')
        out += [f'#PJM -L "elapse={wall}"', f'#PJM --mpi "max-proc-per-node={r}"']
        if account:
            out.append(f"#PJM -g {account}")
        out += ["#PJM -j", f"#PJM -o {job_dir}/out/job.%j.out", "#PJM -S"]
    elif s == "uge":
        out.append(f"#$ -N {name}")
        if d["resource_type"]:
            out.append(f"#$ -l {d['resource_type']}={n}")
        else:
            out.append(f"#$ -pe {d['parallel_environment']} {n * r}")
        out.append(f"#$ -l h_rt={wall}")
        if queue:
            out.append(f"#$ -q {queue}")
        out += ["#$ -j y", f"#$ -o {job_dir}/out/job.out"]
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
