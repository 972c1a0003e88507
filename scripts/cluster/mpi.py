"""The MPI launch lines: one process per node for staging, and the training ranks with their
mapping (ranks per node) and binding (cores per rank), for each MPI flavour.

  openmpi   mpirun -np P --map-by ppr:R:node:PE=T --bind-to core [--hostfile F]
  mpich     mpiexec -n P -ppn R -bind-to core:T [-f F]                  (Hydra)
  intel     mpiexec -n P -ppn R [-f F], pinning by I_MPI_PIN_DOMAIN=T (env.sh)
  fujitsu   mpiexec -n P; ranks per node from #PJM --mpi max-proc-per-node, binding by the job system

Under Slurm the once-per-node step is `srun --ntasks-per-node=1`, which every Slurm has.
"""
import shlex

import schedulers
from description import TUNED_ALLREDUCE


def _q(word):
    # Variables of the running job ($PBS_NODEFILE) stay expandable; everything else is quoted.
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


def per_node_command(d):
    """A command prefix that starts one process on every node of the job. Fujitsu MPI has no
    portable one-per-node option: there every rank runs the step and the node-local lock in
    stage.sh lets the first process of each node do the work."""
    n, flavour, launcher = d["nodes"], d["mpi"]["flavour"], d["mpi"]["launcher"]
    hf = schedulers.hostfile(d)
    if d["scheduler"] == "slurm":
        return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1"]
    if flavour == "openmpi":
        cmd = [launcher, "-np", str(n), "--map-by", "ppr:1:node", "--bind-to", "none"]
        return cmd + (["--hostfile", hf] if hf else []) + d["mpi"]["args"]
    if flavour in ("mpich", "intel"):
        return [launcher, "-n", str(n), "-ppn", "1"] + (["-f", hf] if hf else []) + d["mpi"]["args"]
    return [launcher, "-n", str(n * d["ranks_per_node"])] + d["mpi"]["args"]


def train_command(d):
    """The launch prefix of the training ranks."""
    p, r, t = d["nodes"] * d["ranks_per_node"], d["ranks_per_node"], d["threads_per_rank"]
    flavour, launcher, bind = d["mpi"]["flavour"], d["mpi"]["launcher"], d["mpi"]["bind"]
    hf = schedulers.hostfile(d)
    if flavour == "openmpi":
        cmd = [launcher, "-np", str(p)]
        cmd += ["--map-by", f"ppr:{r}:node:PE={t}", "--bind-to", "core"] if bind == "core" else \
               ["--map-by", f"ppr:{r}:node", "--bind-to", "none"]
        cmd += ["--hostfile", hf] if hf else []
    elif flavour in ("mpich", "intel"):
        cmd = [launcher, "-n", str(p), "-ppn", str(r)] + (["-f", hf] if hf else [])
        if flavour == "mpich" and bind == "core":
            cmd += ["-bind-to", f"core:{t}"]
    else:
        cmd = [launcher, "-n", str(p)]
    return cmd + d["mpi"]["args"]


def environment(d):
    """Variables the flavour needs for its binding and the allreduce choice (exported in env.sh)."""
    env = {}
    if d["mpi"]["flavour"] == "intel" and d["mpi"]["bind"] == "core":
        env["I_MPI_PIN_DOMAIN"] = str(d["threads_per_rank"])
    choice = d["mpi"].get("allreduce", "")
    if choice == "han":
        env["OMPI_MCA_coll_han_priority"] = "100"
    elif choice.startswith("tuned:"):
        env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
        env["OMPI_MCA_coll_tuned_allreduce_algorithm"] = str(TUNED_ALLREDUCE[choice.split(":", 1)[1]])
    return env


def shell(cmd):
    return " ".join(_q(w) for w in cmd)
