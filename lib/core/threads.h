// hpcnn core: the one rule for "how many threads" (every tool's -T 0 / threads 0, the training
// engine, the data decoders):
//   the size of this process's CPU affinity mask when the launcher bound it to fewer cores than
//   the node has (mpirun --bind-to, srun --cpu-bind, taskset), else the node's online cores
//   divided by the ranks on the node; at least 1.
// ranks_on_node comes from the communicator (dist::Communicator::local_size(), from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); 1 for a single process.
#pragma once

namespace hpcnn {

int default_thread_count(int ranks_on_node = 1);
// Cores in this process's CPU affinity mask, and the node's online cores.
int affinity_cores();
int online_cores();

}  // namespace hpcnn
