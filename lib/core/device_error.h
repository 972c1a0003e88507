// hpcnn core: errors of device and communication libraries (CUDA, cuBLAS, cuDNN, NCCL, MPI),
// reported the same way everywhere: the call, file:line, the rank and host of the process, and
// the library's own message, as ErrorKind::device (exit code 5):
//   "cudaMalloc(&p, bytes) failed at lib/x.cu:42 (rank 3 on node07): out of memory"
// The rank and host are set once per process by whoever knows them (dist-train, after its
// communicator is made); before that the message names the host alone.
#pragma once

#include <string>

namespace hpcnn {

void set_process_identity(int rank, const std::string& host);
// "rank 3 on node07", or "host node07" before set_process_identity.
std::string process_identity();

[[noreturn]] void throw_device_error(const char* call, const char* file, int line, const std::string& library_message);

}  // namespace hpcnn
